# One image for all three Nodewarden processes: web (gunicorn), Celery worker and beat.
# docker-compose.yml picks the process with its command.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY . .

# "pip install ." brings the pinned dependencies (psycopg[binary] needs no libpq here).
# The code itself runs from /app via PYTHONPATH, not from site-packages: manage.py lives here.
# (Templates and static files are package data of nodewarden: an installed wheel has them too.)
RUN pip install . \
    && useradd --system --home-dir /app --shell /usr/sbin/nologin nodewarden \
    && mkdir -p /var/lib/nodewarden \
    && chown nodewarden /var/lib/nodewarden

ENV PYTHONPATH=/app \
    NODEWARDEN_VAR_DIR=/var/lib/nodewarden

# Celery warns about running as root; nothing here needs it.
USER nodewarden
EXPOSE 8000
CMD ["gunicorn", "nodewarden.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "2", "--threads", "16"]
