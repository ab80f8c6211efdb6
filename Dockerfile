# Images of the handler and the pool controller:
#   docker build --target handler -t ghcr.io/nmstate-ippool/handler:TAG .
#   docker build --target pool-controller -t ghcr.io/nmstate-ippool/pool-controller:TAG .
# The handler image carries nmstatectl; it talks to the node's
# NetworkManager over the D-Bus socket deploy/handler mounts.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/ ./cmd/handler ./cmd/pool-controller

FROM quay.io/centos/centos:stream9 AS handler
RUN dnf install -y nmstate && dnf clean all
COPY --from=build /out/handler /usr/local/bin/handler
ENTRYPOINT ["/usr/local/bin/handler"]

FROM gcr.io/distroless/static:nonroot AS pool-controller
COPY --from=build /out/pool-controller /usr/local/bin/pool-controller
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/pool-controller"]
