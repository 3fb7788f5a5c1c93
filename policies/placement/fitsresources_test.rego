package fitsresources_test

import rego.v1

import data.fitsresources

gi := 1073741824

# A pool of nodes with the given allocatable combinations.
pool(shapes) := {"node_shapes": [{"nodes": 1, "allocatable": a} | some a in shapes]}

pod(requests) := {"web": {"resource_requirements": requests}}

solutions(targets, requests) := result if {
  result := fitsresources.solutions with input as {
    "infrastructure_targets": targets,
    "services": pod(requests),
    "parameters": {},
  }
}

test_pools_with_a_large_enough_node_are_accepted if {
  targets := {
    "small": pool([{"cpu": 2000, "memory": 8 * gi}]),
    "large": pool([{"cpu": 16000, "memory": 64 * gi}]),
    "mixed": pool([{"cpu": 2000, "memory": 8 * gi}, {"cpu": 8000, "memory": 32 * gi}]),
  }
  solutions(targets, {"cpu": 4000, "memory": 16 * gi}) == {"fulfilled": true, "targets": ["large", "mixed"]}
  solutions(targets, {"cpu": 500, "memory": gi}) == {"fulfilled": true, "targets": ["large", "mixed", "small"]}
}

# The largest cpu and the largest memory on different nodes do not make one node that holds both.
test_one_node_must_hold_every_request if {
  targets := {"split": pool([{"cpu": 16000, "memory": 2 * gi}, {"cpu": 1000, "memory": 64 * gi}])}
  solutions(targets, {"cpu": 4000, "memory": 8 * gi}).fulfilled == false
}

test_a_resource_the_nodes_lack_does_not_fit if {
  targets := {"cpu-only": pool([{"cpu": 16000, "memory": 64 * gi}])}
  solutions(targets, {"cpu": 1000, "nvidia.com/gpu": 1}).fulfilled == false
}

test_a_pod_without_requests_fits_any_pool_with_nodes if {
  targets := {"a": pool([{"cpu": 1000}]), "empty": pool([])}
  solutions(targets, {}) == {"fulfilled": true, "targets": ["a"]}
}

test_the_message_names_the_requests_in_readable_units if {
  targets := {"small": pool([{"cpu": 2000, "memory": 8 * gi}])}
  result := solutions(targets, {"cpu": 64000, "memory": 256 * gi, "ephemeral-storage": 1536 * 1048576, "nvidia.com/gpu": 2, "hugepages-2Mi": 2097152})
  result == {
    "fulfilled": false,
    "msg": "no pool has or can launch a node with room for the pod's requests (cpu 64000m, ephemeral-storage 1536Mi, hugepages-2Mi 2Mi, memory 256Gi, nvidia.com/gpu 2)",
  }
}

test_odd_byte_counts if {
  fitsresources.binary(1536) == "1536"
  fitsresources.binary(3072) == "3Ki"
  fitsresources.binary(1000) == "1000"
}

test_an_exact_fit_fits if {
  targets := {"exact": pool([{"cpu": 4000, "memory": 16 * gi}])}
  solutions(targets, {"cpu": 4000, "memory": 16 * gi}) == {"fulfilled": true, "targets": ["exact"]}
  solutions(targets, {"cpu": 4001, "memory": 16 * gi}).fulfilled == false
}
