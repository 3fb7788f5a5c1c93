package poolguard.admission_test

import data.poolguard.admission

cfg := {"namespaceLabel": "agentpool", "nodeSelectorKey": "agentpool", "repositories": ["registry.k8s.io/"], "pools": {}}

namespaces := {"mapped": {"metadata": {"name": "mapped", "labels": {"agentpool": "pool1"}}}}

pod_review(ns, spec) := {"request": {
	"uid": "u-1",
	"kind": {"kind": "Pod"},
	"operation": "CREATE",
	"namespace": ns,
	"object": {"metadata": {"name": "p"}, "spec": spec},
}}

test_mutate_places_and_annotates if {
	r := admission.mutate with input as pod_review("mapped", {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]})
		with data.config as cfg
		with data.kubernetes.namespaces as namespaces
	r.response.uid == "u-1"
	r.response.allowed
	json.unmarshal(base64.decode(r.response.patch)) == [
		{"op": "add", "path": "/spec/nodeSelector", "value": {"agentpool": "pool1"}},
		{"op": "add", "path": "/metadata/annotations", "value": {"poolguard.io/pool": "pool1"}},
	]
}

test_mutate_unmapped_allows_unchanged if {
	r := admission.mutate with input as pod_review("other", {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]})
		with data.config as cfg
		with data.kubernetes.namespaces as namespaces
	r.response == {"uid": "u-1", "allowed": true}
}

test_validate_allows_placed_pod if {
	r := admission.validate with input as pod_review("mapped", {"nodeSelector": {"agentpool": "pool1"}, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]})
		with data.config as cfg
		with data.kubernetes.namespaces as namespaces
	r.response == {"uid": "u-1", "allowed": true}
}

test_validate_denies_bad_image_and_conflict if {
	r := admission.validate with input as pod_review("mapped", {"nodeSelector": {"agentpool": "pool2"}, "containers": [{"name": "c", "image": "nginx"}]})
		with data.config as cfg
		with data.kubernetes.namespaces as namespaces
	not r.response.allowed
	r.response.status.code == 403
	contains(r.response.status.message, "pool2")
	contains(r.response.status.message, "docker.io/library/nginx")
}
