# syntax=docker/dockerfile:1
# Logtide's images, built by docker-compose.yml (README "Deployment"). Targets:
#   logtide  (the last stage, so also a plain `docker build .`): the `logtide` CLI for capture, dumps
#            and the merge driver (spark-submit), and the Spark standalone master and worker; Python
#            3.11, the project, pyspark, a JRE and the Iceberg/JDBC jars. Runs as uid 50000, gid 0.
#   airflow  apache/airflow with the project, its DAGs and plugins and the `airflow` extra: the
#            api-server, scheduler, dag-processor and triggerer. Runs as `airflow` (uid 50000, gid 0).
#   jars     build stage only: scripts/jars.sh assembles the jars from PyPI and Debian (no Maven),
#            exactly as on a developer machine, checked against its pinned SHA-256 sums.
# Both images run as uid 50000 / gid 0, so every container may write the shared landing zone and
# warehouse volume. Versions are those of pyproject.toml; tests/unit/test_deployment.py checks that
# they agree (and that every COPY source exists).

# Debian 12 (bookworm), as on the development machines (same JRE, same Debian jar packages).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# Must be apache-airflow==<version in pyproject.toml>, on Python 3.11.
ARG AIRFLOW_IMAGE=apache/airflow:3.3.2-python3.11
# Must be the pyspark pin of pyproject.toml (the Spark of the cluster = the Spark of the driver).
ARG PYSPARK_VERSION=3.5.9

# --- base: Python, a JRE for Spark, the project installed editable at /opt/logtide -----------------
FROM ${PYTHON_IMAGE} AS base
ARG PYSPARK_VERSION
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# man1 must exist for the JRE's update-alternatives on slim images
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 50000 --gid 0 --home-dir /home/logtide --create-home logtide \
    && mkdir -p /var/lib/logtide/landing /var/lib/logtide/warehouse /opt/spark-work \
    && chown -R 50000:0 /var/lib/logtide /opt/spark-work \
    && chmod -R g+rwX /var/lib/logtide /opt/spark-work
WORKDIR /opt/logtide
COPY pyproject.toml constraints.txt ./
COPY capture ./capture
COPY spark_apps ./spark_apps
# `logtide merge` submits the package's own capture/merge/__main__.py (spark_apps/merge.py: the same for
# a hand-written spark-submit); spark-submit and spark-class are installed beside the Python that runs
# it (/usr/local/bin). constraints.txt:
# the versions the test suite passed with (the airflow image keeps Airflow's own constraints).
RUN pip install -e . "pyspark==${PYSPARK_VERSION}" -c constraints.txt

# --- jars: the Iceberg runtime, relocated Jackson, SQLite and PostgreSQL JDBC drivers --------------
FROM base AS jars
RUN apt-get update \
    && apt-get install -y --no-install-recommends zip unzip libjarjar-java libasm-java \
       libxerial-sqlite-jdbc-java libxerial-sqlite-jdbc-jni libpostgresql-jdbc-java \
    && rm -rf /var/lib/apt/lists/*
COPY scripts/jars.sh ./scripts/jars.sh
RUN PYTHON=/usr/local/bin/python LOGTIDE_JARS_DIR=/opt/logtide/jars bash scripts/jars.sh

# --- airflow: Airflow with the project, the DAGs and the plugins -----------------------------------
FROM ${AIRFLOW_IMAGE} AS airflow
USER root
RUN mkdir -p /opt/logtide /var/lib/logtide/landing /var/lib/logtide/warehouse \
    && chown -R airflow:0 /opt/logtide /var/lib/logtide \
    && chmod -R g+rwX /var/lib/logtide
USER airflow
WORKDIR /opt/logtide
COPY --chown=airflow:0 pyproject.toml ./
COPY --chown=airflow:0 capture ./capture
COPY --chown=airflow:0 spark_apps ./spark_apps
COPY --chown=airflow:0 dags ./dags
COPY --chown=airflow:0 plugins ./plugins
COPY --chown=airflow:0 --chmod=0755 docker/airflow-init.sh docker/airflow_pools.py ./docker/
# As Airflow's image documentation asks: name apache-airflow (the image's own $AIRFLOW_VERSION) in
# the same pip call, so installing the project cannot move Airflow to another version.
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" -e ".[airflow]"
WORKDIR /opt/airflow

# --- logtide: capture, dumps, merge driver, Spark master and worker ---------------------------------
FROM base AS logtide
COPY --from=jars /opt/logtide/jars ./jars
COPY --chmod=0755 docker/entrypoint.sh docker/merge-loop.sh ./docker/
# PYSPARK_PYTHON: executors run the same Python as the driver (both from this image).
# SPARK_WORKER_DIR: the worker's scratch space (application folders, executor logs).
ENV PYSPARK_PYTHON=/usr/local/bin/python \
    SPARK_WORKER_DIR=/opt/spark-work
USER 50000:0
ENTRYPOINT ["/opt/logtide/docker/entrypoint.sh"]
CMD ["--help"]
