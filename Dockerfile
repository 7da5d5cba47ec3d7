# One image for the API, the migrations and the workers. TORCH_SPEC picks the torch build:
# the default CUDA wheel for GPU hosts; pass --build-arg TORCH_SPEC=torch==2.13.0 for CPU-only.
FROM python:3.11-slim
ARG TORCH_SPEC="torch>=2.4,<2.15"
WORKDIR /app
# bubblewrap: the sandbox of jobs' ranks (util-linux's setpriv and prlimit are in the base image)
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md ./
COPY trainjobs ./trainjobs
COPY service ./service
COPY worker ./worker
COPY migrations ./migrations
RUN pip install --no-cache-dir "$TORCH_SPEC" && pip install --no-cache-dir ".[all]"
# Not root by default: the API and the migrations run as this user. A worker that sandboxes jobs
# runs as root (docker-compose.yml: `user: "0"`) and hands each job's ranks a uid of their own.
RUN useradd --system --uid 10001 --home-dir /var/lib/trainjobs trainjobs \
    && mkdir -p /var/lib/trainjobs && chown trainjobs /var/lib/trainjobs
USER trainjobs
ENV TRAINJOBS_HOME=/var/lib/trainjobs
ENTRYPOINT ["trainjobs"]
