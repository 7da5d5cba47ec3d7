# One image for the API, the migrations and the workers. TORCH_SPEC picks the torch build:
# the default CUDA wheel for GPU hosts; pass --build-arg TORCH_SPEC=torch==2.13.0 for CPU-only.
FROM python:3.11-slim
ARG TORCH_SPEC="torch>=2.4,<2.15"
WORKDIR /app
COPY pyproject.toml README.md ./
COPY trainjobs ./trainjobs
COPY service ./service
COPY worker ./worker
COPY migrations ./migrations
RUN pip install --no-cache-dir "$TORCH_SPEC" && pip install --no-cache-dir ".[all]"
# Not root: a job's code (a plugin's model or dataset) runs as this user.
RUN useradd --system --uid 10001 --home-dir /var/lib/trainjobs trainjobs \
    && mkdir -p /var/lib/trainjobs && chown trainjobs /var/lib/trainjobs
USER trainjobs
ENV TRAINJOBS_HOME=/var/lib/trainjobs
ENTRYPOINT ["trainjobs"]
