// Package deploy holds the files that install snowflake-proxy, and the tests
// that check them without Docker, systemd or Kubernetes at hand:
//
//   - Dockerfile: the container image, built from the repository root
//     with `docker build -f deploy/Dockerfile .`
//   - snowflake-proxy.service: a hardened systemd unit
//   - kubernetes.yaml: a StatefulSet of three proxies, one node each
//   - snowflake-proxy.toml: the commented example config file
//   - deploy_test.go: Dockerfile and unit file lints, the image's
//     HEALTHCHECK run against a local HTTP server, and that .ci/run runs
//     the README's test command
//   - kubernetes_test.go: the manifest's probes, ports and user, and its
//     node-from-ordinal wrapper run with sh
//
// It has no Go code of its own.
package deploy
