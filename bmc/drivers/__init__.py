"""Drivers that speak to BMCs: one per protocol, all behind ``base.BmcDriver``."""
