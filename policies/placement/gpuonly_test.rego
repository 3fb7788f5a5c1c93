package gpuonly_test

import rego.v1

import data.gpuonly

targets := {
  "general": {"resources": {"cpu": 8000, "memory": 34359738368}},
  "gpu": {"resources": {"cpu": 8000, "nvidia.com/gpu": 4}},
  "amd": {"resources": {"cpu": 8000, "amd.com/gpu": 2}},
}

solutions(requests, parameters) := result if {
  result := gpuonly.solutions with input as {
    "infrastructure_targets": targets,
    "services": {"web": {"resource_requirements": requests}},
    "parameters": parameters,
  }
}

test_a_gpu_pod_goes_to_gpu_pools_only if {
  solutions({"cpu": 1000, "nvidia.com/gpu": 1}, {}) == {"fulfilled": true, "targets": ["gpu"]}
}

test_other_pods_stay_off_gpu_pools if {
  # amd.com/gpu is not an accelerator unless the parameters say so.
  solutions({"cpu": 1000}, {}) == {"fulfilled": true, "targets": ["amd", "general"]}
  solutions({"cpu": 1000}, {"resources": ["nvidia.com/gpu", "amd.com/gpu"]}) == {"fulfilled": true, "targets": ["general"]}
}

test_the_resources_parameter_names_the_accelerators if {
  solutions({"amd.com/gpu": 1}, {"resources": ["amd.com/gpu"]}) == {"fulfilled": true, "targets": ["amd"]}
  solutions({"amd.com/gpu": 1, "nvidia.com/gpu": 1}, {"resources": ["amd.com/gpu", "nvidia.com/gpu"]}) == {
    "fulfilled": false,
    "msg": "the pod requests amd.com/gpu, nvidia.com/gpu, which no pool has allocatable",
  }
}

test_a_zero_request_is_no_request if {
  solutions({"nvidia.com/gpu": 0}, {}) == {"fulfilled": true, "targets": ["amd", "general"]}
}

test_no_gpu_pool_for_a_gpu_pod if {
  result := gpuonly.solutions with input as {
    "infrastructure_targets": {"general": targets.general},
    "services": {"web": {"resource_requirements": {"nvidia.com/gpu": 1}}},
    "parameters": {},
  }
  result == {"fulfilled": false, "msg": "the pod requests nvidia.com/gpu, which no pool has allocatable"}
}

test_only_gpu_pools_for_another_pod if {
  result := gpuonly.solutions with input as {
    "infrastructure_targets": {"gpu": targets.gpu},
    "services": {"web": {"resource_requirements": {"cpu": 100}}},
    "parameters": {},
  }
  result == {
    "fulfilled": false,
    "msg": "the pod requests no nvidia.com/gpu and every pool has it (those pools are kept for pods that use it)",
  }
}
