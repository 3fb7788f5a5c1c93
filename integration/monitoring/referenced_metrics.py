#!/usr/bin/env python3
"""Every metric that the alerting rules and the Grafana dashboard read is one poolguard exports.

    python3 integration/monitoring/referenced_metrics.py SCRAPE RULES.yaml DASHBOARD.json

SCRAPE is the text of a real /metrics scrape (OpenMetrics). A family is exported when the scrape
declares it (# TYPE), with or without samples yet; its sample names follow from its type
(counter: NAME_total, histogram: NAME_bucket/_count/_sum, gauge: NAME). The expressions are the
rules' `expr` fields and the dashboard's targets' and variables' queries; in them, every name
that starts with poolguard_ is checked (recording rules are named poolguard:..., Prometheus's own
`up` is not poolguard's). Exit status 1 names each unknown metric and where it is read.
"""
import json
import re
import sys

import yaml

SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_count", "_sum"),
    "gauge": ("",),
    "unknown": ("",),
}
NAME = re.compile(r"(?<![A-Za-z0-9_:])poolguard_[A-Za-z0-9_]+")


def exported(scrape_text):
    names = set()
    for line in scrape_text.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[:2] == ["#", "TYPE"]:
            family, kind = parts[2], parts[3]
            if kind not in SUFFIXES:
                sys.exit(f"scrape: family {family} has type {kind}, which this check does not know")
            names.update(family + s for s in SUFFIXES[kind])
    return names


def rule_exprs(path):
    doc = yaml.safe_load(open(path))
    for group in doc["groups"]:
        for rule in group["rules"]:
            yield f"{path}: {rule.get('alert') or rule.get('record')}", rule["expr"]


def dashboard_exprs(path):
    doc = json.load(open(path))

    def panels(items):
        for p in items:
            yield p
            yield from panels(p.get("panels", []))

    for p in panels(doc["panels"]):
        for t in p.get("targets", []):
            yield f"{path}: panel {p['title']!r}", t["expr"]
    for v in doc.get("templating", {}).get("list", []):
        query = v.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        if v.get("type") == "query" and query:
            yield f"{path}: variable {v['name']}", query


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    scrape, rules, dashboard = sys.argv[1:]
    known = exported(open(scrape).read())
    if not known:
        sys.exit(f"{scrape}: no # TYPE line: not a /metrics scrape")
    unknown, seen = [], {}
    for where, expr in [*rule_exprs(rules), *dashboard_exprs(dashboard)]:
        for name in NAME.findall(expr):
            seen.setdefault(name, set()).add(where.split(":")[0])
            if name not in known:
                unknown.append(f"{where}: {name} is not exported by poolguard")
    for line in unknown:
        print(f"[metrics] FAIL: {line}", file=sys.stderr)
    for name in sorted(seen):
        print(f"[metrics] {name}: read by {', '.join(sorted(seen[name]))}", file=sys.stderr)
    if not seen:
        sys.exit("no poolguard_ metric is read at all: the files are not what this check expects")
    print(f"[metrics] {len(seen)} metrics read by the rules and the dashboard, "
          f"{len(unknown)} references to metrics poolguard does not export", file=sys.stderr)
    sys.exit(1 if unknown else 0)


if __name__ == "__main__":
    main()
