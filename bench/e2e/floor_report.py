#!/usr/bin/env python3
"""Turns create_floor's raw rounds (bench/e2e-floor.sh) into bench/results/e2e-floor.{json,md}.

Per concurrency level and arm: the time the arm's webhooks add to a pod CREATE, paired round by
round (arm minus the same round's baseline, `none`), as median / p90 / p99 with 95 % bootstrap
intervals (rounds resampled with replacement, 2,000 times, fixed seed); and the ratios of
poolguard's added median to null's, to `nullpatch`'s (the null webhook answering with poolguard's
patch, so that the API server's cost of applying it is on both sides) and to OPA's, and of
native's (poolguard's admission policies in the API server, no webhook) to null's, nullpatch's and
poolguard's, resampled jointly over the same rounds. Targets (reported, never asserted), at one
creator: poolguard's added median <= 1.15x null's (and, when it ran, nullpatch's) and <= 0.5x
OPA's; native's <= 0.6x nullpatch's (the cheapest webhook that sets the pool) and, when it ran
(NATIVE_VARIANTS=handwritten), <= 1.2x the hand-written pair's.

With --phases METRICS (poolguard's /metrics text after the rounds): poolguard's own time per
request, by webhook and phase (poolguard_admission_phase_duration_seconds, sum / count), next to
what poolguard adds over the null webhook at one creator: the split of its extra time into its own
handling and the rest (transport, response size, patch application in the API server).

With --policies METRICS (kube-apiserver's /metrics after the rounds): each admission policy's
evaluations and mean time per evaluation (apiserver_*_admission_policy_*duration_seconds, sum /
count per policy), so the native arm's time can be told apart policy by policy.

usage: floor_report.py CLIENT_JSON OUT_JSON OUT_MD [--phases METRICS] [--policies METRICS]
                       [--meta key=value ...]
"""
import json
import random
import re
import sys

RESAMPLES = 2000
SEED = 20261124
# (numerator, denominator) arms whose added medians are compared, where both were measured.
RATIOS = (("poolguard", "null"), ("poolguard", "nullpatch"), ("nullpatch", "null"), ("poolguard", "opa"),
          ("native", "null"), ("native", "nullpatch"), ("native", "poolguard"), ("native", "handwritten"))
NAMES = {"none": "no webhook", "null": "null webhook", "nullpatch": "null webhook with poolguard's patch",
         "opa": "OPA", "poolguard": "poolguard", "native": "poolguard native"}


def quantile(sorted_xs, q):
    """Nearest-rank quantile of an already sorted list."""
    if not sorted_xs:
        return None
    k = max(0, min(len(sorted_xs) - 1, int(round(q * (len(sorted_xs) - 1)))))
    return sorted_xs[k]


def interval(samples):
    s = sorted(x for x in samples if x is not None)
    return [quantile(s, 0.025), quantile(s, 0.975)] if s else [None, None]


PHASES = ("read", "wait", "parse", "lookup", "evaluate", "respond")


def histogram_series(text, name):
    """The `_sum`, `_count` and `_bucket` samples of the histograms whose name matches the regex
    `name` in Prometheus text: (metric, suffix, labels, value) each."""
    pattern = re.compile(r'^(' + name + r')_(sum|count|bucket)\{([^}]*)\} (\S+)$')
    for line in text.splitlines():
        m = pattern.match(line)
        if m:
            yield m.group(1), m.group(2), dict(re.findall(r'(\w+)="([^"]*)"', m.group(3))), float(m.group(4))


def phase_means(text):
    """{webhook: {"requests": n, phase: mean µs, ..., "total": µs}} from poolguard's /metrics."""
    sums, counts, buckets = {}, {}, {}
    for _, suffix, labels, value in histogram_series(text, "poolguard_admission_phase_duration_seconds"):
        key = (labels.get("webhook"), labels.get("phase"))
        if suffix == "bucket":
            buckets.setdefault(key, []).append((float(labels["le"]), value))
        else:
            (sums if suffix == "sum" else counts)[key] = value
    out = {}
    for (webhook, phase), n in counts.items():
        if not n:
            continue
        row = out.setdefault(webhook, {"requests": 0, "median_le": {}})
        row["requests"] = max(row["requests"], int(n))
        row[phase] = sums.get((webhook, phase), 0.0) / n * 1e6
        # The median's bucket: the smallest upper bound holding half the requests.
        row["median_le"][phase] = next((le * 1e6 for le, c in sorted(buckets.get((webhook, phase), []))
                                        if c >= n / 2), None)
    for row in out.values():
        row["total"] = sum(row.get(p, 0.0) for p in PHASES)
    return out


def policy_means(text):
    """{(metric, policy): {"evaluations": n, "mean_us": µs}} from kube-apiserver's /metrics."""
    sums, counts = {}, {}
    for metric, suffix, labels, value in histogram_series(text, r"apiserver_\w*admission_policy\w*duration_seconds"):
        if suffix == "bucket" or "policy" not in labels:
            continue
        key = (metric, labels["policy"])
        target = sums if suffix == "sum" else counts
        target[key] = target.get(key, 0.0) + value
    return {f"{metric} {policy}": {"evaluations": int(n), "mean_us": sums.get((metric, policy), 0.0) / n * 1e6}
            for (metric, policy), n in sorted(counts.items()) if n}


def main():
    args = sys.argv[1:]
    if len(args) < 3:
        sys.exit(__doc__)
    client, out_json, out_md = args[:3]
    rest = args[3:]
    phases = None
    if rest[:1] == ["--phases"] and len(rest) >= 2:
        phases = phase_means(open(rest[1]).read())
        rest = rest[2:]
    policies = None
    if rest[:1] == ["--policies"] and len(rest) >= 2:
        policies = policy_means(open(rest[1]).read())
        rest = rest[2:]
    meta = {}
    if rest:
        if rest[0] != "--meta":
            sys.exit(__doc__)
        for kv in rest[1:]:
            k, _, v = kv.partition("=")
            meta[k] = v
    data = json.load(open(client))
    arms = data["arms"]
    base = arms.index(data["baseline"])
    others = [a for a in arms if a != data["baseline"]]
    rng = random.Random(SEED)
    levels = []
    for level in data["levels"]:
        rows = [r["us"] for r in level["rows"]]
        n = len(rows)
        added = {a: [r[arms.index(a)] - r[base] for r in rows] for a in others}
        picks = [[rng.randrange(n) for _ in range(n)] for _ in range(RESAMPLES)]
        arm_stats = {}
        for a in others:
            xs = sorted(added[a])
            stats = {}
            for name, q in (("median", 0.5), ("p90", 0.9), ("p99", 0.99)):
                boot = [quantile(sorted(added[a][i] for i in p), q) for p in picks]
                stats[name] = {"us": quantile(xs, q), "ci95": interval(boot)}
            lat = sorted(r[arms.index(a)] for r in rows)
            stats["latency_median_us"] = quantile(lat, 0.5)
            arm_stats[a] = stats
        base_lat = sorted(r[base] for r in rows)
        ratios = {}
        for num_arm, den_arm in RATIOS:
            if num_arm not in others or den_arm not in others:
                continue

            def ratio(p):
                num = quantile(sorted(added[num_arm][i] for i in p), 0.5)
                den = quantile(sorted(added[den_arm][i] for i in p), 0.5)
                return num / den if den else None

            ratios[f"{num_arm}/{den_arm}"] = {
                "median_added_ratio": ratio(range(n)),
                "ci95": interval(ratio(p) for p in picks),
            }
        levels.append({
            "concurrency": level["concurrency"],
            "rounds": n,
            "wall_seconds": level["wall_seconds"],
            "baseline_median_us": quantile(base_lat, 0.5),
            "added": arm_stats,
            "ratios": ratios,
        })
    targets = {}
    first = levels[0] if levels else None
    if first and first["ratios"]:
        r = first["ratios"]
        for key, text, met in (
                ("poolguard/null", "poolguard's added median <= 1.15x the null webhook's (one creator)", lambda x: x <= 1.15),
                ("poolguard/nullpatch", "poolguard's added median <= 1.15x the null webhook's that answers with "
                 "poolguard's patch (one creator)", lambda x: x <= 1.15),
                ("poolguard/opa", "poolguard's added median <= 0.5x OPA's (one creator)", lambda x: x <= 0.5),
                ("native/nullpatch", "native's added median <= 0.6x the null webhook's that answers with "
                 "poolguard's patch (one creator)", lambda x: x <= 0.6),
                ("native/handwritten", "native's added median <= 1.2x the hand-written pair's (one creator)",
                 lambda x: x <= 1.2)):
            if key in r and r[key]["median_added_ratio"] is not None:
                targets[text] = met(r[key]["median_added_ratio"])
    out = {"meta": meta, "arms": arms, "webhook_calls": data.get("webhook_calls"),
           "levels": levels, "targets_met": targets}
    if phases:
        out["poolguard_phases_us"] = phases
    if policies is not None:
        out["apiserver_policies"] = policies
    json.dump(out, open(out_json, "w"), indent=2)

    ms = lambda us: "–" if us is None else f"{us / 1000:.2f}"
    ci = lambda c: f"[{ms(c[0])}, {ms(c[1])}]"
    title = " / ".join(NAMES.get(a, a) for a in arms)
    md = [f"## Pod CREATE through kube-apiserver: {title} — {meta.get('date', '?')}\n"]
    md.append(
        f"{meta.get('kubernetes', '?')} (etcd + kube-apiserver only) on 127.0.0.1, {meta.get('nproc', '?')} cores "
        f"shared with the servers and the client; {meta.get('poolguard', '?')}; {meta.get('opa', '?')} serving the "
        "AdmissionReview itself (bench/opa/admission.rego)"
        + ("; `native`: the MutatingAdmissionPolicy/ValidatingAdmissionPolicy objects `poolguard native` generates, "
           f"no webhook ({meta.get('native_objects', '?')} objects)" if "native" in arms else "")
        + ". Each round creates one pod per arm, arm order rotating; "
        "added = arm minus the same round's `none`. Brackets: 95 % bootstrap intervals. "
        f"Load average {meta.get('loadavg_start', '?')} → {meta.get('loadavg_end', '?')}.\n"
    )
    md.append("| creators | rounds | arm | added median, ms | added p90, ms | added p99, ms |")
    md.append("|---:|---:|---|---:|---:|---:|")
    for lv in levels:
        for a in others:
            s = lv["added"][a]
            md.append(
                f"| {lv['concurrency']} | {lv['rounds']} | {a} | {ms(s['median']['us'])} {ci(s['median']['ci95'])} "
                f"| {ms(s['p90']['us'])} {ci(s['p90']['ci95'])} | {ms(s['p99']['us'])} {ci(s['p99']['ci95'])} |"
            )
    md.append("")
    keys = [f"{a}/{b}" for a, b in RATIOS if a in others and b in others]
    md.append("| creators | baseline median, ms | " + " | ".join(f"{k} added median" for k in keys) + " |")
    md.append("|---:|---:|" + "---:|" * len(keys))
    fr = lambda r: "–" if not r or r["median_added_ratio"] is None else (
        f"{r['median_added_ratio']:.2f} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}]"
        if None not in r["ci95"] else f"{r['median_added_ratio']:.2f}")
    for lv in levels:
        md.append(f"| {lv['concurrency']} | {ms(lv['baseline_median_us'])} | "
                  + " | ".join(fr(lv["ratios"].get(k)) for k in keys) + " |")
    md.append("")
    md.append("Targets (reported, not asserted): " + "; ".join(
        f"{k}: {'met' if v else 'NOT met'}" for k, v in targets.items()) + ".")
    md.append(f"\nWebhook calls as kube-apiserver counted them (each equal to the pods created in its arm): "
              f"{json.dumps(data.get('webhook_calls'))}"
              + (f"; native arms {json.dumps(data.get('native_arms'))}: no webhook, their policies set the pool on "
                 "every pod and refused a foreign image before and after the rounds" if data.get("native_arms") else "")
              + "\n")
    if phases:
        md.append("poolguard's own time per request (its `poolguard_admission_phase_duration_seconds` over every "
                  "request of the run, warm-up and all creator levels included), µs: the mean (sum / count), and "
                  "below it the upper bound of the histogram bucket holding the median (buckets double from 5 µs):\n")
        md.append("| webhook | requests | " + " | ".join(PHASES) + " | total |")
        md.append("|---|---:|" + "---:|" * (len(PHASES) + 1))
        le = lambda v: "–" if v is None else f"≤ {v:.0f}"
        for webhook, row in sorted(phases.items()):
            md.append(f"| {webhook} | {row['requests']} | "
                      + " | ".join(f"{row.get(p, 0.0):.0f}" for p in PHASES) + f" | {row['total']:.0f} |")
            md.append(f"| {webhook}, median | | "
                      + " | ".join(le(row["median_le"].get(p)) for p in PHASES) + " | |")
        own = sum(row["total"] for row in phases.values())
        if first and "poolguard" in first["added"] and "null" in first["added"]:
            extra = first["added"]["poolguard"]["median"]["us"] - first["added"]["null"]["median"]["us"]
            md.append(f"\nAt one creator poolguard adds {ms(extra)} ms more than the null webhook (added medians); "
                      f"its own handling of one pod (mutate + validate, means) is {ms(own)} ms, "
                      f"so {ms(extra - own)} ms is outside poolguard's handlers (TLS and HTTP on both sides, "
                      "the response's size, the API server applying the patch and decoding the reply).")
            if "nullpatch" in first["added"]:
                patch = first["added"]["nullpatch"]["median"]["us"] - first["added"]["null"]["median"]["us"]
                md.append(f"The null webhook answering with poolguard's patch adds {ms(patch)} ms more than without "
                          f"it: the API server's share of a mutating answer, which any webhook that sets the pool pays; "
                          f"poolguard adds {ms(extra - patch)} ms over that arm.")
            md.append("")
    if policies:
        md.append("kube-apiserver's own count and mean time per evaluation of each admission policy "
                  "(its /metrics after the run, every arm and level), µs:\n")
        md.append("| metric | policy | evaluations | mean, µs |")
        md.append("|---|---|---:|---:|")
        for key, row in policies.items():
            metric, policy = key.split(" ", 1)
            md.append(f"| {metric} | {policy} | {row['evaluations']} | {row['mean_us']:.0f} |")
        md.append("")
    text = "\n".join(md)
    open(out_md, "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
