# The poolguard decision written for OPA, for the benchmark only (bench/README.md).
#
# Query: POST /v1/data/poolguard/bench/decision with {"input": <AdmissionReview>}.
# Data (bench/work/opa-data.json):
#   data.kubernetes.namespaces[<name>]  Namespace objects (labels under metadata.labels)
#   data.config.namespaceLabel, .nodeSelectorKey, .repositories, .pools[<pool>].repositories
#
# For a Pod CREATE it computes, in one query, what poolguard's two webhooks decide:
#   - placement: when the namespace's pool label is set, a JSONPatch adding the pool as the
#     nodeSelector (the whole map when there is none or it is empty, else only the key); a
#     selector naming another pool is a conflict (denied);
#   - allowed repositories: every container, initContainer and ephemeralContainer image is
#     normalized (docker.io/library for short names, the first component is a registry only
#     when it has "." or ":" or is localhost, Docker Hub aliases folded, tag and digest dropped)
#     and must equal an allowed entry or start with it followed by "/" (whole components).
package poolguard.bench

request := input.request

pod_create if {
	request.kind.kind == "Pod"
	request.operation == "CREATE"
}

pool := data.kubernetes.namespaces[request.namespace].metadata.labels[data.config.namespaceLabel]

key := data.config.nodeSelectorKey

selector := object.get(request.object, ["spec", "nodeSelector"], {})

# --- placement -----------------------------------------------------------------------------

# JSON Pointer escaping of the key ("~" first, then "/").
escaped_key := replace(replace(key, "~", "~0"), "/", "~1")

default patch := []

patch := [{"op": "add", "path": "/spec/nodeSelector", "value": {key: pool}}] if {
	pod_create
	count(selector) == 0
}

patch := [{"op": "add", "path": concat("/", ["/spec/nodeSelector", escaped_key]), "value": pool}] if {
	pod_create
	count(selector) > 0
	not key in object.keys(selector)
}

conflicts contains msg if {
	pod_create
	selector[key] != pool
	msg := sprintf(
		"namespace %q is in pool %q; the pod asks for %s=%q",
		[request.namespace, pool, key, selector[key]],
	)
}

# --- allowed repositories ------------------------------------------------------------------

# The pool's own list when it has one, else the cluster-wide list.
repositories := object.get(data.config.pools, [pool_name, "repositories"], data.config.repositories)

prefixes contains p if {
	some entry in repositories
	p := trim_right(entry, "/")
	p != ""
}

images contains [c.name, c.image] if {
	some field in ["containers", "initContainers", "ephemeralContainers"]
	some c in object.get(request.object, ["spec", field], [])
}

infringements contains msg if {
	pod_create
	some [name, image] in images
	repo := repository(image)
	not allowed(repo)
	msg := sprintf(
		"container %q: image %q (repository %q) is not from an allowed repository %v",
		[name, image, repo, repositories],
	)
}

allowed(repo) if prefixes[repo]

allowed(repo) if {
	some p in prefixes
	startswith(repo, concat("", [p, "/"]))
}

# registry/path without tag or digest.
repository(image) := concat("/", [registry, path]) if {
	name := strip_tag(split(image, "@")[0])
	[first, rest] := split_registry(name)
	registry := hub_alias(first)
	path := library(registry, rest)
}

# A tag follows the last ":" after the last "/".
strip_tag(name) := regex.replace(name, `:[^:/]*$`, "")

split_registry(name) := [first, rest] if {
	i := indexof(name, "/")
	i >= 0
	first := substring(name, 0, i)
	is_registry(first)
	rest := substring(name, i + 1, -1)
} else := ["docker.io", name]

is_registry(s) if contains(s, ".")

is_registry(s) if contains(s, ":")

is_registry("localhost")

hub_alias(r) := "docker.io" if r in {"docker.io", "index.docker.io", "registry-1.docker.io"}

hub_alias(r) := r if not r in {"docker.io", "index.docker.io", "registry-1.docker.io"}

library("docker.io", path) := concat("/", ["library", path]) if not contains(path, "/")

library(registry, path) := path if {
	not library_needed(registry, path)
}

library_needed("docker.io", path) if not contains(path, "/")

# --- the answer ----------------------------------------------------------------------------

denials := conflicts | infringements

default pool_name := null

pool_name := pool

default decision := {"allowed": true}

decision := {
	"allowed": count(denials) == 0,
	"patch": patch,
	"denials": denials,
	"pool": pool_name,
} if pod_create
