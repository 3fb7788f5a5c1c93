# OPA serving the AdmissionReview itself, as a kube-mgmt style deployment does, for the floor arms
# of bench/e2e-latency.sh (FLOOR=1; bench/README.md). kube-apiserver calls OPA directly:
#
#   mutating webhook    POST /v0/data/poolguard/admission/mutate    body: the AdmissionReview
#   validating webhook  POST /v0/data/poolguard/admission/validate  body: the AdmissionReview
#
# The v0 API takes the request body as the input and answers with the document unwrapped, so each
# rule below is a whole AdmissionReview. The decision is the benchmark's (poolguard.rego, same
# data: data.kubernetes.namespaces, data.config):
#   - mutate: for a Pod CREATE in a namespace with a pool, the JSONPatch placing the pod in the
#     pool (nodeSelector, as poolguard.rego builds it) plus the poolguard.io/pool annotation that
#     poolguard's mutating webhook sets; otherwise allowed unchanged;
#   - validate: denied with the placement conflicts and disallowed images, else allowed.
package poolguard.admission

import data.poolguard.bench

review(response) := {
	"apiVersion": "admission.k8s.io/v1",
	"kind": "AdmissionReview",
	"response": object.union({"uid": input.request.uid}, response),
}

annotations := object.get(input.request.object, ["metadata", "annotations"], {})

default annotation_patch := []

annotation_patch := [{"op": "add", "path": "/metadata/annotations", "value": {"poolguard.io/pool": bench.pool}}] if {
	bench.pod_create
	count(annotations) == 0
}

annotation_patch := [{"op": "add", "path": "/metadata/annotations/poolguard.io~1pool", "value": bench.pool}] if {
	bench.pod_create
	count(annotations) > 0
}

patch := array.concat(bench.patch, annotation_patch)

mutate := review({"allowed": true, "patchType": "JSONPatch", "patch": base64.encode(json.marshal(patch))}) if {
	count(patch) > 0
} else := review({"allowed": true})

validate := review({"allowed": true}) if {
	count(bench.denials) == 0
} else := review({"allowed": false, "status": {"code": 403, "message": concat("; ", sort(bench.denials))}})
