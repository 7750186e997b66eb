# Placeholder until the install issue: a valid single-stage image running gpuqueue.
FROM python:3.11-slim
WORKDIR /app
COPY . /app
RUN pip install --no-cache-dir .
USER 65532:65532
ENTRYPOINT ["gpuqueue"]
