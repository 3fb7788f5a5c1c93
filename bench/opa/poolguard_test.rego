# `opa test bench/opa`: the normalization and matching cases poolguard's README and image.rs list.
package poolguard.bench_test

import data.poolguard.bench

test_repository if {
	cases := {
		"nginx": "docker.io/library/nginx",
		"nginx:1.27": "docker.io/library/nginx",
		"nginx@sha256:0123abcd": "docker.io/library/nginx",
		"nginx:1.27@sha256:0123abcd": "docker.io/library/nginx",
		"bitnami/redis:7": "docker.io/bitnami/redis",
		"docker.io/nginx": "docker.io/library/nginx",
		"index.docker.io/library/nginx:latest": "docker.io/library/nginx",
		"registry-1.docker.io/bitnami/redis": "docker.io/bitnami/redis",
		"registry.example.com/app:1.0": "registry.example.com/app",
		"registry.example.com:5000/team/app:1.0": "registry.example.com:5000/team/app",
		"localhost/app": "localhost/app",
		"localhost:5000/app:dev": "localhost:5000/app",
	}
	every image, want in cases {
		bench.repository(image) == want
	}
}

cfg := {"namespaceLabel": "agentpool", "nodeSelectorKey": "agentpool", "repositories": ["registry.example.com/"], "pools": {}}

nss := {
	"mapped": {"metadata": {"name": "mapped", "labels": {"agentpool": "pool1"}}},
	"plain": {"metadata": {"name": "plain"}},
}

review(ns, spec) := {"request": {
	"uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE", "namespace": ns,
	"object": {"spec": spec},
}}

test_whole_component_match if {
	d := bench.decision with input as review("plain", {"containers": [
		{"name": "a", "image": "registry.example.com/app"},
		{"name": "b", "image": "registry.example.com.evil.io/app"},
		{"name": "c", "image": "registry.example.comx/app"},
		{"name": "d", "image": "registry.example.com:5000/app"},
	]})
		with data.config as cfg
		with data.kubernetes.namespaces as nss
	d.allowed == false
	count(d.denials) == 3
	d.patch == []
}

test_patch_mapped if {
	d := bench.decision with input as review("mapped", {"containers": [{"name": "a", "image": "registry.example.com/app"}]})
		with data.config as cfg
		with data.kubernetes.namespaces as nss
	d.allowed
	d.patch == [{"op": "add", "path": "/spec/nodeSelector", "value": {"agentpool": "pool1"}}]
}

test_patch_adds_key if {
	d := bench.decision with input as review("mapped", {"nodeSelector": {"kubernetes.io/os": "linux"}, "containers": []})
		with data.config as cfg
		with data.kubernetes.namespaces as nss
	d.patch == [{"op": "add", "path": "/spec/nodeSelector/agentpool", "value": "pool1"}]
}

test_placed_no_patch if {
	d := bench.decision with input as review("mapped", {"nodeSelector": {"agentpool": "pool1"}, "containers": []})
		with data.config as cfg
		with data.kubernetes.namespaces as nss
	d.allowed
	d.patch == []
}

test_conflict if {
	d := bench.decision with input as review("mapped", {"nodeSelector": {"agentpool": "other"}, "containers": []})
		with data.config as cfg
		with data.kubernetes.namespaces as nss
	not d.allowed
}

test_pool_parameters if {
	c := object.union(cfg, {"pools": {"pool1": {"repositories": ["gpu.example.com"]}}})
	d := bench.decision with input as review("mapped", {"nodeSelector": {"agentpool": "pool1"}, "containers": [
		{"name": "a", "image": "gpu.example.com/x:1"},
		{"name": "b", "image": "registry.example.com/app"},
	]})
		with data.config as c
		with data.kubernetes.namespaces as nss
	count(d.denials) == 1
}
