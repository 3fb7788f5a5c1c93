#!/usr/bin/env python3
"""One NATIVE_VARIANTS arm of bench/e2e-floor.sh or bench/native-cpu.sh: reads the objects
`poolguard native` generated for the arm's namespace label (the YAML it prints) and prints them
as a v1 List (JSON), renamed floor-<variant>-... and changed as the variant says:

  baseline   unchanged (renamed only; bench/e2e-floor.sh generates it with another binary)
  never      the MutatingAdmissionPolicy at reinvocationPolicy: Never
  noskip     the MutatingAdmissionPolicy without its matchCondition
  drop-NAME  without the policy poolguard-NAME and its binding
  merged     the ValidatingAdmissionPolicies that apply to a pool without settings of its own
             (no `.pool-` in their names, all at Deny in the bench's config) folded into one,
             with one binding: each policy's variables prefixed, their validations one after
             the other. A measurement of what one policy in place of several would cost, not
             the generated objects' semantics (only the first failing validation's message is
             returned, and the bindings' namespace selectors are the placement policy's).
  shared     merged, and a variable whose expression an earlier policy's variable already has
             (the pod spec, its images, whether they are readable) is that one: worked out once
  static     every validation without its messageExpression (its static `message` only):
             what the detailed messages cost. kube-apiserver evaluates a policy's
             messageExpressions on every request, admitted or not, in an activation of their own
             (the object converted and the variables worked out again), so a generated message,
             which tests its validation first, costs that validation a second time
  refused    each validating policy that does not read the namespace evaluated only for a
             request it refuses: a matchCondition `refused`, true when one of its validations
             fails, after its other matchConditions; an admitted request then costs that
             condition alone, not the validations and their messageExpressions. kube-apiserver
             gives a matchCondition neither the policy's variables (inlined here, so one read
             twice is worked out twice) nor the namespace (`namespaceObject` has no fields there),
             nor `cel.bind`
  shared-static  shared and static together: one validating policy, its shared variables worked
             out once, no messageExpression

usage: native_variant.py VARIANT < objects.yaml > list.json
"""
import json
import re
import sys

import yaml

VARIANTS = ("never", "noskip", "merged", "shared", "static", "shared-static", "refused", "baseline")


def prefixed(policy, prefix, known):
    """The policy's variables renamed <prefix>_<name>, in every expression that reads them. With
    `known` (a dict, expression -> name, updated), a variable whose renamed expression an earlier
    policy already has is that one: worked out once for all."""
    aliases = {}
    rename = lambda text: re.sub(r"variables\.(\w+)",
                                 lambda m: f"variables.{aliases[m.group(1)]}" if m.group(1) in aliases else m.group(0),
                                 text)
    variables = []
    for v in policy["spec"].get("variables", []):
        expression = rename(v["expression"])
        if known is not None and expression in known:
            aliases[v["name"]] = known[expression]
            continue
        aliases[v["name"]] = f"{prefix}_{v['name']}"
        variables.append({"name": aliases[v["name"]], "expression": expression})
        if known is not None:
            known[expression] = aliases[v["name"]]
    validations = []
    for v in policy["spec"]["validations"]:
        v = dict(v)
        v["expression"] = rename(v["expression"])
        if "messageExpression" in v:
            v["messageExpression"] = rename(v["messageExpression"])
        validations.append(v)
    return variables, validations


def inlined(expression, variables):
    """`expression` with every `variables.NAME` replaced by NAME's expression (inlined in turn), in
    brackets: a matchCondition cannot read the policy's variables, nor bind its own (`cel.bind`
    is not in its environment), so a variable read twice is worked out twice."""
    exprs = {v["name"]: v["expression"] for v in variables}
    done = {}

    def expand(text):
        return re.sub(r"variables\.(\w+)", lambda m: f"({resolve(m.group(1))})", text)

    def resolve(name):
        if name not in done:
            done[name] = expand(exprs[name])
        return done[name]

    return expand(expression)


def main():
    variant = sys.argv[1]
    if variant not in VARIANTS and not (variant.startswith("drop-") and len(variant) > len("drop-")):
        sys.exit(f"native_variant.py: unknown variant {variant} ({', '.join(VARIANTS)}, drop-NAME)")
    items = [item for item in yaml.safe_load_all(sys.stdin) if item]
    dropped = "poolguard-" + variant[len("drop-"):] if variant.startswith("drop-") else None
    if dropped:
        kept = [i for i in items if i["metadata"]["name"] != dropped]
        if len(kept) != len(items) - 2:
            sys.exit(f"NATIVE_VARIANTS: {variant}: no policy and binding named {dropped}")
        items = kept
    if variant in ("merged", "shared", "shared-static"):
        folded = [i for i in items if i["kind"] == "ValidatingAdmissionPolicy" and ".pool-" not in i["metadata"]["name"]]
        if len(folded) < 2:
            sys.exit("NATIVE_VARIANTS: merged: fewer than two policies to fold")
        placement = next(i for i in items if i["kind"] == "ValidatingAdmissionPolicyBinding"
                         and i["metadata"]["name"] == "poolguard-placement")
        merged = json.loads(json.dumps(folded[0]))
        merged["metadata"]["name"] = "poolguard-merged"
        merged["spec"]["variables"], merged["spec"]["validations"] = [], []
        known = {} if variant in ("shared", "shared-static") else None
        for n, policy in enumerate(folded):
            if policy["spec"].get("matchConditions") != merged["spec"].get("matchConditions"):
                sys.exit("NATIVE_VARIANTS: merged: the policies' matchConditions differ")
            variables, validations = prefixed(policy, f"p{n}", known)
            merged["spec"]["variables"] += variables
            merged["spec"]["validations"] += validations
        binding = json.loads(json.dumps(placement))
        binding["metadata"]["name"] = binding["spec"]["policyName"] = "poolguard-merged"
        items = [i for i in items if i["kind"].startswith("Mutating")] + [merged, binding]
    out = []
    for item in items:
        rename = lambda name: name.replace("poolguard-", f"floor-{variant}-", 1)
        item["metadata"]["name"] = rename(item["metadata"]["name"])
        if "policyName" in item["spec"]:
            item["spec"]["policyName"] = rename(item["spec"]["policyName"])
        if item["kind"] == "MutatingAdmissionPolicy":
            if variant == "never":
                item["spec"]["reinvocationPolicy"] = "Never"
            elif variant == "noskip":
                del item["spec"]["matchConditions"]
        if item["kind"] == "ValidatingAdmissionPolicy" and variant == "refused":
            conjunction = " && ".join(f"({v['expression']})" for v in item["spec"]["validations"])
            refused = inlined(f"!({conjunction})", item["spec"].get("variables", []))
            # kube-apiserver evaluates matchConditions without the namespace (namespaceObject
            # has no fields there): a policy that reads it keeps its messages' cost.
            if "namespaceObject" not in refused:
                item["spec"].setdefault("matchConditions", []).append({"name": "refused", "expression": refused})
        if item["kind"] == "ValidatingAdmissionPolicy" and variant in ("static", "shared-static"):
            for validation in item["spec"]["validations"]:
                validation.pop("messageExpression", None)
        out.append(item)
    print(json.dumps({"apiVersion": "v1", "kind": "List", "items": out}))


if __name__ == "__main__":
    main()
