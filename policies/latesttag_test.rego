package latesttag_test

import rego.v1

import data.latesttag

digest := "sha256:0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd"

pod(images) := {"services": {"web": {"functional_requirements": {name: {"image": image, "name": name} |
  some i, image in images
  name := sprintf("c%d", [i])
}}}}

denied(images, exempt) := result if {
  doc := object.union(pod(images), {"parameters": {"exemptRepositories": exempt}})
  result := latesttag.infringement with input as doc
}

test_floating_references_are_denied if {
  every image in [
    "nginx",
    "nginx:latest",
    "docker.io/library/nginx:latest",
    "registry.example.com/app",
    "registry.example.com:5000/app",
    "registry.example.com:5000/team/app:latest",
    "localhost:5000/app",
    "Evilhost/app",
  ] {
    count(denied([image], [])) == 1
  }
}

test_versions_and_digests_pass if {
  count(denied([
    "nginx:1.27",
    "registry.example.com:5000/app:v2",
    concat("", ["nginx@", digest]),
    concat("", ["nginx:latest@", digest]),
    concat("", ["registry.example.com/app@", digest]),
    "app:Latest",
    "app:latest-1",
    "app:1-latest",
  ], [])) == 0
}

test_without_the_parameter_nothing_is_exempt if {
  count(latesttag.infringement) == 1 with input as object.union(pod(["nginx"]), {"parameters": {}})
}

test_exempt_repositories_match_whole_components if {
  count(denied(["registry.example.com/dev/app:latest"], ["registry.example.com/dev/"])) == 0
  count(denied(["registry.example.com/dev/app"], ["registry.example.com/dev"])) == 0
  count(denied(["registry.example.com/dev"], ["registry.example.com/dev"])) == 0
  count(denied(["registry.example.com/devtools/app"], ["registry.example.com/dev"])) == 1
  count(denied(["registry.example.com.evil.io/dev/app"], ["registry.example.com"])) == 1
  count(denied(["registry.example.com:5000/app"], ["registry.example.com"])) == 1
}

test_exempt_entries_are_normalized_repositories if {
  count(denied(["nginx", "busybox:latest"], ["docker.io/library/"])) == 0
  count(denied(["bitnami/redis"], ["docker.io/library/"])) == 1
  # An empty entry exempts nothing.
  count(denied(["nginx"], [""])) == 1
}

test_every_floating_image_is_reported if {
  msgs := {m.msg | some m in denied(["a.example.com/x", "b.example.com/y:latest", "c.example.com/z:1"], [])}
  count(msgs) == 2
}

test_messages_name_what_carries_the_image_and_why if {
  doc := {
    "parameters": {},
    "services": {"web": {"functional_requirements": {
      "app": {"image": "registry.example.com/app", "type": "container", "name": "app"},
      "volume:models": {"image": "registry.example.com/models:latest", "type": "imageVolume", "name": "models"},
      "init": {"image": "registry.example.com/init:1", "type": "initContainer", "name": "init"},
    }}},
  }
  msgs := {m.msg | some m in latesttag.infringement with input as doc}
  msgs == {
    `container "app": image "registry.example.com/app" has no tag, so the runtime pulls :latest; pin a version tag or a digest`,
    `image volume "models": image "registry.example.com/models:latest" uses the :latest tag; pin a version tag or a digest`,
  }
}
