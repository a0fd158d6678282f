// Package deploy holds the tests of Stockguard's deployment files: the Helm
// chart (rendered by helm and strict-decoded into the Kubernetes API types),
// and the Grafana dashboard and Prometheus rules (every query parsed as
// PromQL and checked against the metrics the service registers). It is a
// module of its own so that the Kubernetes, Prometheus and Helm
// dependencies stay out of the service's go.mod.
package deploy
