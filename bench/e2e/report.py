#!/usr/bin/env python3
"""Report of bench/e2e-latency.sh: merges the measuring client's JSON with the run's metadata,
writes the results JSON and a Markdown table, and prints the table.

    report.py CLIENT_JSON OUT_JSON OUT_MD --meta key=value...
"""
import argparse
import json
import sys

TARGET_US = 1000.0  # < 1 ms median added to a pod CREATE


def fmt(us):
    return f"{us:,.0f}"


def signed(us):
    return f"{us:+,.0f}"


def target_verdict(main):
    """("met" | "NOT met" | "borderline", why): both the difference of the medians and the 95% CI
    of the median per-pair difference must be on the same side of 1 ms."""
    added = main["added"]["p50_us"]
    diff = main["paired_difference"]
    lo, hi = diff["ci95_low_us"], diff["ci95_high_us"]
    why = (f"added median {fmt(added)} µs; median paired difference {fmt(diff['median_us'])} µs, "
           f"95% CI {fmt(lo)}–{fmt(hi)} µs")
    if added < TARGET_US and hi < TARGET_US:
        return "met", why
    if added >= TARGET_US and lo >= TARGET_US:
        return "NOT met", why
    return "borderline", why + ": on both sides of 1 ms"


def row(name, s):
    return f"| {name} | {s['n']} | {fmt(s['p50_us'])} | {fmt(s['p90_us'])} | {fmt(s['p99_us'])} | {fmt(s['max_us'])} |"


def added_row(name, a):
    return f"| {name} | | {signed(a['p50_us'])} | {signed(a['p90_us'])} | {signed(a['p99_us'])} | |"


def markdown(r):
    meta, main, sanity = r["meta"], r["main"], r["sanity"]
    verdict, why = target_verdict(main)
    out = [
        f"## Pod CREATE through kube-apiserver, with and without poolguard — {meta['date']}",
        "",
        f"{meta['kubernetes']} (etcd + kube-apiserver on 127.0.0.1, no controllers), {meta['poolguard']} "
        f"({meta.get('poolguard_build', 'release build')}, `integration/e2e/manifests/poolguard-config.yaml`, "
        f"`policies/`; pool `{r['pool']}`: "
        "mutating placement + validating placement and `allowedrepositories`). One pod CREATE in flight, "
        "timed by the client around `Api::create`; pods alternate between a namespace poolguard's webhooks "
        f"select (`{r['selected_by']}`) and one they do not, same pool label; {r['warmup_pairs']} warm-up pairs. "
        f"{meta['nproc']} cores shared by everything; load average {meta['loadavg_start']} (start) → "
        f"{meta['loadavg_end']} (end).",
        "",
        "| pod CREATE, µs | n | p50 | p90 | p99 | max |",
        "|---|---:|---:|---:|---:|---:|",
        row("without poolguard", main["without"]),
        row("with poolguard (2 webhook calls)", main["with"]),
        added_row("**added by poolguard**", main["added"]),
        "",
        f"Median of the per-pair differences: {fmt(main['paired_difference']['median_us'])} µs "
        f"(95% CI {fmt(main['paired_difference']['ci95_low_us'])}–{fmt(main['paired_difference']['ci95_high_us'])} µs).",
    ]
    calls = main.get("apiserver_webhook_calls")
    if calls:
        parts = [f"`{name}` {c['calls']} calls, mean {fmt(c['mean_us'])} µs" for name, c in calls.items()]
        out.append("Where the time goes (means over the measured pods): kube-apiserver's "
                   "`apiserver_admission_webhook_admission_duration_seconds` (call to the webhook, as the "
                   "API server times it): " + "; ".join(parts) + ".")
    handling = main.get("poolguard_handling")
    if handling:
        parts = [f"`/{name}` {c['calls']} requests, mean {fmt(c['mean_us'])} µs" for name, c in handling.items()]
        out.append("poolguard's own `poolguard_admission_request_duration_seconds` (handling inside "
                   "poolguard, without TLS and transport): " + "; ".join(parts) + ".")
    out += ["", f"Target < 1 ms median added: **{verdict}** ({why}).", ""]
    if sanity:
        out += [
            f"Sanity phase: {sanity['blocks']} blocks of {sanity['pairs_per_block']} pairs, webhook configurations "
            "registered (R) and deleted (D) in the order R D D R R D D R … (each change took effect after "
            + ", ".join(f"{ms:.0f}" for ms in sanity["toggle_effective_ms"]) + " ms):",
            "",
            "| pod CREATE, µs | n | p50 | p90 | p99 | max |",
            "|---|---:|---:|---:|---:|---:|",
            row("selected namespace, configurations registered", sanity["registered_with_ns"]),
            row("selected namespace, configurations deleted", sanity["deleted_with_ns"]),
            row("other namespace, configurations registered", sanity["registered_without_ns"]),
            row("other namespace, configurations deleted", sanity["deleted_without_ns"]),
            added_row("added: registered vs deleted (selected namespace)", sanity["added_vs_deleted"]),
            added_row("not selected vs deleted (other namespace)", sanity["not_selected_vs_deleted"]),
            "",
        ]
        out += [
            "Reading it: \"not selected vs deleted\" near 0 means that skipping poolguard through the "
            "namespaceSelector costs what not registering it costs, so the interleaved main table is a fair "
            "with/without comparison. A clearly positive value would mean that pods skipping poolguard are "
            "slowed by their neighbours going through it (shared CPUs), and the main table then understates "
            "the added time by about that much. Blocks are not interleaved pod by pod, so drift of the "
            "machine shows more here than in the main table; the block medians show the spread.",
            "",
        ]
        blocks = sanity.get("per_block", [])
        for ns, key in (("selected", "with_ns_p50_us"), ("other", "without_ns_p50_us")):
            reg = ", ".join(fmt(b[key]) for b in blocks if b["registered"])
            dele = ", ".join(fmt(b[key]) for b in blocks if not b["registered"])
            out.append(f"Block medians, {ns} namespace, µs: registered {reg}; deleted {dele}.")
        out.append("")
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("client_json")
    p.add_argument("out_json")
    p.add_argument("out_md")
    p.add_argument("--meta", nargs="*", default=[], metavar="KEY=VALUE")
    a = p.parse_args()
    try:
        with open(a.client_json) as f:
            r = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"cannot read the client's results {a.client_json}: {e}")
    meta = {}
    for kv in a.meta:
        key, sep, value = kv.partition("=")
        if not sep:
            sys.exit(f"--meta wants KEY=VALUE, got {kv!r}")
        meta[key] = value
    for key in ("date", "kubernetes", "poolguard", "nproc", "loadavg_start", "loadavg_end"):
        if key not in meta:
            sys.exit(f"--meta {key}=... is missing")
    for key, kind in (("nproc", int), ("measure_seconds", float)):
        if key in meta:
            try:
                meta[key] = kind(meta[key])
            except ValueError:
                sys.exit(f"--meta {key}={meta[key]!r} is not a number")
    r = {"meta": meta, **r}
    r["target"] = {"added_p50_below_us": TARGET_US, "verdict": target_verdict(r["main"])[0]}
    md = markdown(r)
    with open(a.out_json, "w") as f:
        json.dump(r, f, indent=2)
        f.write("\n")
    with open(a.out_md, "w") as f:
        f.write(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
