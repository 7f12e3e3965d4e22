# The manager image. Base images are pinned by digest: `make docker-build`, `make docker-buildx` and
# `make release` pass GO_IMAGE and BASE_IMAGE from hack/base-images.env (refresh the pins with
# hack/pin-base-images.sh). The defaults below are only for a bare `docker build`.
ARG GO_IMAGE=golang:1.27.3
ARG BASE_IMAGE=gcr.io/distroless/static:nonroot

# Build the manager binary.
FROM ${GO_IMAGE} AS builder
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=(devel)
ARG COMMIT=unknown

WORKDIR /workspace
# Download the modules first: this layer is reused until go.mod or go.sum change.
COPY go.mod go.mod
COPY go.sum go.sum
RUN go mod download

COPY cmd/ cmd/
COPY api/ api/
COPY controllers/ controllers/
COPY webhooks/ webhooks/
COPY internal/ internal/

# BuildKit sets TARGETOS and TARGETARCH from --platform; an empty GOARCH means the builder's own.
# The flags are `make build-platforms`' (LDFLAGS in the Makefile).
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath \
    -ldflags="-s -w -X github.com/ray-tpu/tpu-slice-operator/internal/version.version=${VERSION} -X github.com/ray-tpu/tpu-slice-operator/internal/version.commit=${COMMIT}" \
    -o manager cmd/main.go

# A minimal, non-root runtime image: https://github.com/GoogleContainerTools/distroless
FROM ${BASE_IMAGE}
ARG VERSION=(devel)
LABEL org.opencontainers.image.source="https://github.com/ray-tpu/tpu-slice-operator" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
WORKDIR /
COPY --from=builder /workspace/manager .
USER 65532:65532

ENTRYPOINT ["/manager"]
