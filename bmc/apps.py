from django.apps import AppConfig


class BmcConfig(AppConfig):
    name = "bmc"
    verbose_name = "BMC (out-of-band control)"
