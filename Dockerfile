# The Logtide image: the `logtide` CLI and its pinned dependencies.
FROM python:3.11-slim
WORKDIR /opt/logtide
COPY pyproject.toml README.md ./
COPY capture ./capture
RUN pip install --no-cache-dir .
ENTRYPOINT ["logtide"]
