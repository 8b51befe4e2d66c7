# The SMF Assurance Gate image: the `smf-assurance` command, nothing else
# (docker-compose.yml runs the gates, the example connectors and the console
# from it; README "Running on a cluster").
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Only what the package is built from (see .dockerignore); the source tree is
# not kept in the image.
WORKDIR /src
COPY pyproject.toml README.md ./
COPY smf_assurance ./smf_assurance
RUN pip install . && rm -rf /src

# The console's PDF renderer (pdf.js, pinned by digest) fetched at build time into a
# read-only folder of the image, so a console without egress to the npm registry still
# draws a filing's pages: docker-compose.yml names it (`console --pdf-renderer`), and
# the console checks each file's digest when it starts (docs/CONSOLE.md, "Documents").
RUN XDG_CACHE_HOME=/opt/cache python -c "from smf_assurance.ops.local.pdf_renderer import fetch_renderer; fetch_renderer()"

# A non-root user owns the state; a named volume mounted on /var/lib/smf takes
# this ownership when it is created empty.
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/smf --no-create-home smf \
    && install -d -o smf -g smf -m 0750 /var/lib/smf
USER smf
WORKDIR /var/lib/smf
ENV XDG_STATE_HOME=/var/lib/smf

ENTRYPOINT ["smf-assurance"]
CMD ["--help"]
