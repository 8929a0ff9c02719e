# ReviewHub: one image for the web process (gunicorn) and the Celery workers.
FROM python:3.11-slim-bookworm

# Static files are collected into the image (not under REVIEWHUB_VAR_DIR, which compose mounts
# as a volume that would keep the files of an older image) and WhiteNoise serves the collected,
# pre-compressed copies from there.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    REVIEWHUB_VAR_DIR=/var/lib/reviewhub \
    DJANGO_STATIC_ROOT=/app/staticfiles \
    REVIEWHUB_STATIC_USE_FINDERS=0

WORKDIR /app
# Pango and its fonts lay out the selection report's PDF (WeasyPrint).
RUN apt-get update \
    && apt-get install -y --no-install-recommends libpango-1.0-0 libpangoft2-1.0-0 fonts-liberation \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --system --create-home --home-dir /home/reviewhub reviewhub \
    && mkdir -p /var/lib/reviewhub && chown reviewhub /var/lib/reviewhub

# Dependencies first so that code edits do not reinstall them.
COPY pyproject.toml README.md ./
RUN mkdir -p reviewhub studies judges annotations snapshots calibration reports imports evalstats \
    && pip install --upgrade pip && pip install . && pip uninstall -y reviewhub

COPY . .
RUN pip install --no-deps . \
    && DJANGO_SECRET_KEY=build-only DJANGO_DEBUG=0 python manage.py collectstatic --noinput

USER reviewhub
EXPOSE 8000
CMD ["gunicorn", "reviewhub.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", "--access-logfile", "-"]
