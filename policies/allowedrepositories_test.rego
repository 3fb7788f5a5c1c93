package allowedrepositories_test

import rego.v1

import data.allowedrepositories

test_image_repository_table if {
  cases := {
    "nginx": "docker.io/library/nginx",
    "nginx:1.27": "docker.io/library/nginx",
    "nginx@sha256:0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd": "docker.io/library/nginx",
    "nginx:1.27@sha256:0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd": "docker.io/library/nginx",
    "bitnami/redis:7": "docker.io/bitnami/redis",
    "docker.io/nginx": "docker.io/library/nginx",
    "index.docker.io/library/nginx:latest": "docker.io/library/nginx",
    "docker.io/bitnami/redis": "docker.io/bitnami/redis",
    "registry.example.com/app:1.0": "registry.example.com/app",
    "registry.example.com:5000/team/app:1.0": "registry.example.com:5000/team/app",
    "localhost/app": "localhost/app",
    "localhost:5000/app:dev": "localhost:5000/app",
    "gcr.io/project/app@sha256:0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd": "gcr.io/project/app",
    "registry.example.com/team/app": "registry.example.com/team/app",
    "Evilhost/app:1": "Evilhost/app",
    "LOCALHOST/app": "LOCALHOST/app",
    "registry-1.docker.io/library/nginx": "registry-1.docker.io/library/nginx",
  }
  every image, want in cases {
    poolguard.image_repository(image) == want
  }
}

pod(images) := {"services": {"web": {"functional_requirements": {name: {"image": image} |
  some i, image in images
  name := sprintf("c%d", [i])
}}}}

denied(images, repositories) := result if {
  doc := object.union(pod(images), {"parameters": {"repositories": repositories}})
  result := allowedrepositories.infringement with input as doc
}

test_allowed_registry_with_and_without_trailing_slash if {
  count(denied(["registry.example.com/app:1"], ["registry.example.com/"])) == 0
  count(denied(["registry.example.com/app:1"], ["registry.example.com"])) == 0
}

test_lookalike_registries_are_denied if {
  count(denied(["registry.example.com.evil.io/app"], ["registry.example.com"])) == 1
  count(denied(["registry.example.comx/app"], ["registry.example.com/"])) == 1
}

test_allowed_path_elsewhere_in_the_reference_is_denied if {
  count(denied(["evil.example.org/registry.example.com/app"], ["registry.example.com"])) == 1
  count(denied(["evil.example.org/team/app"], ["team"])) == 1
}

test_other_port_is_another_registry if {
  count(denied(["registry.example.com:5000/app"], ["registry.example.com"])) == 1
  count(denied(["registry.example.com:5000/app"], ["registry.example.com:5000"])) == 0
}

test_path_prefix_matches_whole_components if {
  count(denied(["registry.example.com/team/app"], ["registry.example.com/team"])) == 0
  count(denied(["registry.example.com/teamx/app"], ["registry.example.com/team"])) == 1
}

test_docker_hub_short_names if {
  count(denied(["nginx", "busybox:1.36"], ["docker.io/library/"])) == 0
  count(denied(["bitnami/redis"], ["docker.io/library/"])) == 1
  count(denied(["nginx"], ["registry.example.com/"])) == 1
}

test_exact_repository if {
  count(denied(["docker.io/library/nginx@sha256:0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd"], ["docker.io/library/nginx"])) == 0
  count(denied(["docker.io/library/nginx-evil"], ["docker.io/library/nginx"])) == 1
}

test_every_bad_image_is_reported if {
  msgs := {m.msg | some m in denied(["a.example.com/x", "b.example.com/y", "registry.example.com/z"], ["registry.example.com"])}
  count(msgs) == 2
  some m in msgs
  contains(m, "a.example.com/x")
}

test_empty_allow_list_denies_everything if {
  count(denied(["registry.example.com/app"], [])) == 1
}

test_empty_entry_allows_nothing if {
  count(denied(["registry.example.com/app"], [""])) == 1
}

test_message_names_container_image_and_allowed_list if {
  some m in denied(["evil.io/app:1"], ["registry.example.com/"])
  contains(m.msg, `container "c0"`)
  contains(m.msg, `"evil.io/app:1"`)
  contains(m.msg, "registry.example.com/")
}

# The runtime pulls `Evilhost/app` from the host Evilhost, not from Docker Hub.
test_uppercase_first_component_is_a_registry if {
  count(denied(["Evilhost/app:1", "LOCALHOST/app"], ["docker.io/"])) == 2
  count(denied(["evilhost/app:1"], ["docker.io/"])) == 0
}

test_message_names_what_carries_the_image if {
  doc := {
    "parameters": {"repositories": ["registry.example.com/"]},
    "services": {"web": {"functional_requirements": {
      "volume:models": {"image": "evil.io/models:1", "type": "imageVolume", "name": "models"},
      "init": {"image": "evil.io/init:1", "type": "initContainer", "name": "init"},
    }}},
  }
  msgs := {m.msg | some m in allowedrepositories.infringement with input as doc}
  msgs == {
    `image volume "models": image "evil.io/models:1" (repository "evil.io/models") is not from an allowed repository ["registry.example.com/"]`,
    `initContainer "init": image "evil.io/init:1" (repository "evil.io/init") is not from an allowed repository ["registry.example.com/"]`,
  }
}
