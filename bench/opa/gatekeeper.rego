# The Gatekeeper comparison of bench/cores.sh (CORE_POLICY=gatekeeper): OPA evaluates the
# ConstraintTemplate's Rego (testdata/gatekeeper/allowedrepos, package k8sallowedrepos, loaded
# beside this file) with the input Gatekeeper gives it: the AdmissionRequest as `input.review`
# and the constraint's parameters (data.parameters) as `input.parameters`.
#
# Query: POST /v1/data/bench/gatekeeper/violations with {"input": <AdmissionReview>}.
# Gatekeeper's own framework (matching, enforcement actions, its audit cache) is not here, so
# this is a lower bound of what Gatekeeper spends per request.
package bench.gatekeeper

import rego.v1

violations := found if {
	found := data.k8sallowedrepos.violation with input as {"review": input.request, "parameters": data.parameters}
}
