#!/usr/bin/env python3
"""Turns create_floor's raw rounds (bench/e2e-floor.sh) into bench/results/e2e-floor.{json,md}.

Per concurrency level and arm: the time the arm's webhooks add to a pod CREATE, paired round by
round (arm minus the same round's baseline, `none`), as median / p90 / p99 with 95 % bootstrap
intervals (rounds resampled with replacement, 2,000 times, fixed seed); and the ratios of
poolguard's added median to null's and to OPA's, and of native's (poolguard's admission policies in
the API server, no webhook) to null's and to poolguard's, resampled jointly over the same rounds.
Targets (reported, never asserted), at one creator: poolguard's added median <= 1.15x null's and
<= 0.5x OPA's; native's < 0.5x null's.

usage: floor_report.py CLIENT_JSON OUT_JSON OUT_MD [--meta key=value ...]
"""
import json
import random
import sys

RESAMPLES = 2000
SEED = 20261124
# (numerator, denominator) arms whose added medians are compared, where both were measured.
RATIOS = (("poolguard", "null"), ("poolguard", "opa"), ("native", "null"), ("native", "poolguard"))
NAMES = {"none": "no webhook", "null": "null webhook", "opa": "OPA", "poolguard": "poolguard",
         "native": "poolguard native"}


def quantile(sorted_xs, q):
    """Nearest-rank quantile of an already sorted list."""
    if not sorted_xs:
        return None
    k = max(0, min(len(sorted_xs) - 1, int(round(q * (len(sorted_xs) - 1)))))
    return sorted_xs[k]


def interval(samples):
    s = sorted(x for x in samples if x is not None)
    return [quantile(s, 0.025), quantile(s, 0.975)] if s else [None, None]


def main():
    args = sys.argv[1:]
    if len(args) < 3:
        sys.exit(__doc__)
    client, out_json, out_md = args[:3]
    meta = {}
    if len(args) > 3:
        if args[3] != "--meta":
            sys.exit(__doc__)
        for kv in args[4:]:
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
                ("poolguard/opa", "poolguard's added median <= 0.5x OPA's (one creator)", lambda x: x <= 0.5),
                ("native/null", "native's added median < 0.5x the null webhook's (one creator)", lambda x: x < 0.5)):
            if key in r and r[key]["median_added_ratio"] is not None:
                targets[text] = met(r[key]["median_added_ratio"])
    out = {"meta": meta, "arms": arms, "webhook_calls": data.get("webhook_calls"),
           "levels": levels, "targets_met": targets}
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
    text = "\n".join(md)
    open(out_md, "w").write(text)
    print(text)


main()
