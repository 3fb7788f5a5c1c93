#!/usr/bin/env python3
"""Generates the benchmark inputs into OUT_DIR (default bench/work):

- namespaces.json : a v1 List of N Namespace objects as `kubectl get namespaces -o json` prints
                    it (poolguard --namespaces-file); every even index is labelled
                    agentpool=pool-<i % 50>, so half are mapped.
- opa-data.json   : the same namespaces as data.kubernetes.namespaces[name] plus the
                    allowedrepositories parameters (data.config), loaded by `opa run`.
- reviews/pg/*.json and reviews/opa/*.json : the same AdmissionReviews (Pod CREATE with 1, 3 and
  10 containers, in mapped and unmapped namespaces); the OPA copies are wrapped as {"input": review}.
  Shaped like the pods of ReplicaSets as the validating webhook sees them: one generateName and
  spec per file, a name of their own (`web-5d9c7b-seqno`: the load generator's --seq-token seqno
  puts each request's sequence number there).
- reviews-distinct/{pg,opa}/*.json : the same, but the first container's image tag also carries
  the token (`:1.0-seqno`), so that every request is a different pod.
  Mapped pods already carry nodeSelector agentpool=<their pool> (what the validating webhook sees
  after the mutating one); unmapped pods carry none. All images are allowed, so every decision is
  "allowed" on both servers.

usage: gen.py [OUT_DIR] [NAMESPACES]
"""
import json
import os
import sys

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "work")
count = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
POOLS = 50
# Same parameters as testdata/config/example.yaml, which poolguard is given (keep in sync).
REPOSITORIES = ["registry.example.com/", "registry.k8s.io/"]
POOL_REPOSITORIES = {"gpu": ["registry.example.com/", "gpu.example.com/"]}

# Replaced by each request's sequence number (bench/loadgen --seq-token).
SEQ = "seqno"
for kind in ("reviews", "reviews-distinct"):
    for server in ("pg", "opa"):
        os.makedirs(os.path.join(out, kind, server), exist_ok=True)


def ns_name(i):
    return f"ns-{i:05d}"


def pool_of(i):
    return f"pool-{i % POOLS}" if i % 2 == 0 else None


namespaces = []
for i in range(count):
    meta = {"name": ns_name(i), "labels": {"kubernetes.io/metadata.name": ns_name(i)}}
    if pool_of(i):
        meta["labels"]["agentpool"] = pool_of(i)
    namespaces.append({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})

# A v1 List in JSON, as `kubectl get namespaces -o json` writes it.
with open(os.path.join(out, "namespaces.json"), "w") as f:
    json.dump({"apiVersion": "v1", "kind": "List", "items": namespaces}, f)

with open(os.path.join(out, "opa-data.json"), "w") as f:
    json.dump(
        {
            "kubernetes": {"namespaces": {n["metadata"]["name"]: n for n in namespaces}},
            "config": {
                "namespaceLabel": "agentpool",
                "nodeSelectorKey": "agentpool",
                "repositories": REPOSITORIES,
                "pools": {p: {"repositories": r} for p, r in POOL_REPOSITORIES.items()},
            },
        },
        f,
    )

IMAGES = [
    "registry.example.com/team/app{i}:1.{i}",
    "registry.k8s.io/pause:3.10",
    "registry.example.com/team/sidecar{i}@sha256:" + "ab" * 32,
    "registry.example.com/base/tools{i}:v{i}",
]


def review(uid, ns_index, containers, distinct=False):
    pool = pool_of(ns_index)
    spec = {
        "containers": [
            {"name": f"c{c}", "image": IMAGES[c % len(IMAGES)].format(i=c), "resources": {}}
            for c in range(containers)
        ]
    }
    if distinct:
        spec["containers"][0]["image"] += "-" + SEQ
    if pool:
        spec["nodeSelector"] = {"agentpool": pool}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": ns_name(ns_index),
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:kube-system:replicaset-controller",
                "groups": ["system:serviceaccounts", "system:authenticated"],
            },
            "object": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "generateName": "web-5d9c7b-",
                    "name": "web-5d9c7b-" + SEQ,
                    "namespace": ns_name(ns_index),
                    "labels": {"app": "web", "pod-template-hash": "5d9c7b"},
                },
                "spec": spec,
            },
            "oldObject": None,
            "dryRun": False,
        },
    }


# 4 namespaces per (containers, mapped) combination, spread over the 10,000.
names = []
for containers in (1, 3, 10):
    for mapped in (True, False):
        for k in range(4):
            base = (containers * 997 + k * 2503) % (count - 1)
            idx = base if (base % 2 == 0) == mapped else base + 1
            uid = f"bench-{containers}c-{'mapped' if mapped else 'unmapped'}-{k}"
            for kind, distinct in (("reviews", False), ("reviews-distinct", True)):
                r = review(uid, idx, containers, distinct)
                with open(os.path.join(out, kind, "pg", uid + ".json"), "w") as f:
                    json.dump(r, f)
                with open(os.path.join(out, kind, "opa", uid + ".json"), "w") as f:
                    json.dump({"input": r}, f)
            names.append(uid)
print(f"gen.py: {count} namespaces, {len(names)} reviews in {out}")

# One review that both must refuse (Docker Hub image in a mapped namespace): a sanity check that
# the two policies agree, not part of the load.
os.makedirs(os.path.join(out, "bad"), exist_ok=True)
bad = review("bench-bad-image", 0, 2)
bad["request"]["object"]["spec"]["containers"][1]["image"] = "nginx:1.27"
with open(os.path.join(out, "bad", "pg.json"), "w") as f:
    json.dump(bad, f)
with open(os.path.join(out, "bad", "opa.json"), "w") as f:
    json.dump({"input": bad}, f)
