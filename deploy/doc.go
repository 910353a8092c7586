// Package deploy holds the files that install snowflake-proxy, and the tests
// that check them without Docker, systemd or Kubernetes at hand:
//
//   - Dockerfile: the container image, built from the repository root
//     with `docker build -f deploy/Dockerfile .`
//   - snowflake-proxy.service: a hardened systemd unit
//   - kubernetes.yaml: a Deployment of three proxies, each claiming its
//     node (--node auto)
//   - snowflake-proxy.toml: the commented example config file
//   - deploy_test.go: Dockerfile and unit file lints, the image's
//     HEALTHCHECK run against a local HTTP server, and that .ci/run runs
//     the README's test command
//   - kubernetes_test.go: the manifest's probes, ports, user, and flags
//     (the image's ENTRYPOINT runs the proxy, with --node auto)
//
// It has no Go code of its own.
package deploy
