# Build the manager binary.
FROM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH

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
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -ldflags="-s -w" -o manager cmd/main.go

# A minimal, non-root runtime image: https://github.com/GoogleContainerTools/distroless
FROM gcr.io/distroless/static:nonroot
WORKDIR /
COPY --from=builder /workspace/manager .
USER 65532:65532

ENTRYPOINT ["/manager"]
