# The Sluice server's container image: the static binary, a CA bundle (for
# rediss://, MySQL over TLS and an https OpenTelemetry collector) and an
# empty data folder, on no base image at all. Build it with `make image`,
# which builds dist/sluice-linux-<arch> and stages the CA bundle and the
# data folder under dist/ first (docs/howto/deploy.md); the build pulls nothing.
FROM scratch

ARG TARGETARCH=amd64

COPY dist/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --chown=65532:65532 dist/image-data/ /data/
COPY dist/sluice-linux-${TARGETARCH} /sluice

# Listen on every interface of the container: a non-loopback address makes
# `serve` refuse to start until a root key is configured (SLUICE_ROOT_KEYS,
# --root-key-file or --root-key-sha256). The admin listener (/metrics,
# /readyz, /debug/pprof/) has no authentication: publish it only to a
# private network. Flags given after the image name beat these.
ENV SLUICE_HTTP_ADDR=0.0.0.0:7070 \
    SLUICE_ADMIN_ADDR=0.0.0.0:7071 \
    SLUICE_DATA_DIR=/data \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt

# 7070: the API (HTTP/1.1 and h2c, Envoy RLS); 7071: the admin listener.
EXPOSE 7070 7071
VOLUME /data
USER 65532:65532
ENTRYPOINT ["/sluice"]
CMD ["serve"]
