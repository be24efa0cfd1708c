# Worker and producer image for CUDA hosts.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY schemas schemas
COPY producer producer
COPY workers workers
COPY migrations migrations
COPY scripts scripts
RUN pip install --no-cache-dir ".[gpu,gateway]" \
    && pip uninstall -y torchvision torchaudio torchcodec || true
ENTRYPOINT ["llmq"]
