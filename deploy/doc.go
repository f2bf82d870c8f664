// Package deploy holds what an operator needs to run firn — the release
// command and its container image (release.sh; Dockerfile for Docker
// builds from source), Kubernetes manifests (kubernetes/, kustomize) and a
// Helm chart (helm/firn/), a local compose cluster (compose/), a systemd
// unit (systemd/), chrony guidance (chrony/), Chaos Mesh game days
// (chaos/), Prometheus rules (prometheus/) and a Grafana dashboard
// (grafana/) — and the tests that keep those files true to the firn
// binary.
//
// It is its own Go module so that the main module carries no Kubernetes,
// Helm, kustomize, Prometheus-operator or Prometheus-server dependencies.
// It does not import the main module: the tests build ../cmd/firn and run
// it as a process, as an operator would.
//
// Invariants the tests hold:
//   - every metric name in the rules and the dashboard, found by parsing
//     their PromQL, is exposed on /metrics by a running node (or written by
//     Prometheus itself: up), and promtool accepts that exposition;
//   - promtool checks and unit-tests the rules, and every alert has a
//     summary, a description, a severity and a unit test that fires it;
//   - Kubernetes manifests decode strictly into the Kubernetes,
//     cert-manager and Prometheus-operator API types, name only flags
//     `firn serve --help` lists, and probe endpoints a node really answers;
//     so do the documents kustomize builds from them and those the Helm
//     chart renders (with Helm's and kustomize's own libraries), and the
//     base needs neither the Prometheus operator nor an example host;
//   - the Dockerfile's build commands, run outside Docker, give static
//     binaries, and its USER is numeric and not root;
//   - the image release.sh builds runs under podman as the StatefulSet
//     runs it (uid 65532, read-only root, the data dir a volume): it
//     reports its version, serves IDs, answers the probes and stops
//     cleanly on SIGTERM; the StatefulSet names it by the release's
//     version, and the Dockerfile's final stage has its settings;
//   - images in compose.yaml other than firn's are pinned by digest.
//
// Hazards: the tests start real firn nodes on loopback ports and run
// promtool (Debian's prometheus package) and podman with runc (Debian's
// packages); test/run.sh installs them, and the image test needs root.
// Docker does not run where the tests run, so the Dockerfile and compose
// file are checked as files, never built or started.
package deploy
