#!/usr/bin/env bash
# Hold a poolguard OCI image archive against the Dockerfile that defines it, reading what the
# archive really holds (index, manifest, config, layers; every blob checked against its digest)
# rather than trusting the script that built it.
#
#   integration/image/check.sh IMAGE.oci.tar [Dockerfile]   # a line per check, status 1 if one fails
#   integration/image/check.sh --summary IMAGE.oci.tar       # one line: ID, size, files, entries
#
# What is compared (the Dockerfile's plan comes from dockerfile.sh next to this script):
#   * the config: USER, EXPOSE, ENTRYPOINT, CMD, ENV, WORKDIR and LABEL of the runtime stage, over
#     the distroless static nonroot base's PATH, SSL_CERT_FILE, user 65532 and workdir
#     /home/nonroot; platform linux/amd64;
#   * each COPY: a directory of the build context must arrive file for file with the same bytes
#     and modes (or --chmod), owned by root, and nothing else under its destination; a file from the
#     build stage must be an ELF executable owned by root and executable by all, statically linked,
#     without a symbol table when the build stage strips it, and `--version` must print
#     `poolguard <version of Cargo.toml's [package]>`;
#   * the base: nonroot (65532) in /etc/passwd and /etc/group, /home/nonroot (0700, 65532),
#     /tmp (1777), /root (0700), a CA bundle of more than 50 certificates, zoneinfo UTC,
#     /etc/services, /etc/protocols, /etc/mime.types, nsswitch.conf and os-release;
#   * nothing else that runs: no ELF file but the copied binaries, no shell, no package manager.
# Lines read "[image-check] ok: ..." or "[image-check] FAIL: ..."; an archive that cannot be read
# is a one-line "[image] error: ..." with status 1. Needs bash, jq, tar, coreutils (sha256sum,
# od, timeout), awk and readelf (binutils); not root.
set -euo pipefail
export LC_ALL=C

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
die() {
    printf '[image] error: %s\n' "$*" >&2
    exit 1
}
usage() {
    sed -n '6,7s/^#  *//p' "${BASH_SOURCE[0]}" >&2
    exit 2
}

summary_only=0
if [[ ${1:-} == --summary ]]; then
    summary_only=1
    shift
fi
(($# >= 1)) || usage
archive=$1
dockerfile=${2:-Dockerfile}
for pair in jq:jq tar:tar sha256sum:coreutils od:coreutils timeout:coreutils awk:mawk readelf:binutils; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || die "${pair%%:*} is missing (Debian: apt-get install -y ${pair#*:})"
done

if ((!summary_only)); then
    plan="$("${here}/dockerfile.sh" "${dockerfile}")" || exit 1
    root="$(cd "$(dirname "${dockerfile}")" && pwd)"
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/poolguard-check.XXXXXX")"
trap 'chmod -R u+rwX "${tmp}" 2>/dev/null; rm -rf "${tmp}"' EXIT

# --- the archive: index, manifest, config, layers ---------------------------------------------------
[[ -f ${archive} && -r ${archive} ]] || die "${archive}: no such readable file"
mkdir "${tmp}/oci"
tar -xf "${archive}" -C "${tmp}/oci" --no-same-owner --no-same-permissions 2>"${tmp}/tar.err" \
    || die "${archive}: not a readable tar archive: $(head -n1 "${tmp}/tar.err")"
chmod -R u+rwX "${tmp}/oci"
[[ -f ${tmp}/oci/index.json ]] || die "${archive}: no index.json"
# blob DIGEST: its path, once its bytes match the digest.
blob() {
    local digest=$1 sum
    [[ ${digest} =~ ^[a-z0-9]+:[0-9a-f]+$ ]] || die "${archive}: malformed digest '${digest}'"
    REPLY="${tmp}/oci/blobs/${digest%%:*}/${digest#*:}"
    [[ -f ${REPLY} ]] || die "${archive}: blob ${digest} is missing"
    sum="$(sha256sum <"${REPLY}")"
    [[ ${sum%% *} == "${digest#*:}" ]] || die "blob ${digest} does not match its digest"
}
jq -e . "${tmp}/oci/index.json" >/dev/null 2>&1 || die "${archive}: index.json is not JSON"
n="$(jq '.manifests // [] | length' "${tmp}/oci/index.json")"
[[ ${n} == 1 ]] || die "${archive} holds ${n} manifests, expected 1"
blob "$(jq -r '.manifests[0].digest' "${tmp}/oci/index.json")"
manifest=${REPLY}
jq -e '(.config.digest | type) == "string" and (.layers | type) == "array"' "${manifest}" >/dev/null 2>&1 \
    || die "${archive}: the manifest names no config or no layers"
config_digest="$(jq -r '.config.digest' "${manifest}")"
blob "${config_digest}"
config=${REPLY}
jq -e . "${config}" >/dev/null 2>&1 || die "${archive}: the config is not JSON"
mapfile -t layer_digests < <(jq -r '.layers[].digest' "${manifest}")
layers_size="$(jq '[.layers[].size] | add // 0' "${manifest}")"

# The files of the image: each layer listed in order, later entries replacing earlier ones and
# whiteouts (.wh.NAME) removing NAME and what is below it. Names stay as tar prints them in its C
# quoting style (printable ASCII as is, the rest escaped), so a name is always one printable word.
# Table: key (/path), type (tar's letter: - d l h c b p ...), mode (octal), uid, gid, size, layer,
# name in the layer, separated by \x1f.
: >"${tmp}/listing"
for ((i = 0; i < ${#layer_digests[@]}; i++)); do
    blob "${layer_digests[i]}"
    ln -sf "${REPLY}" "${tmp}/layer${i}"
    printf '@LAYER %d\n' "${i}" >>"${tmp}/listing"
    tar --numeric-owner --full-time --quoting-style=c -tvf "${tmp}/layer${i}" >>"${tmp}/listing" 2>"${tmp}/tar.err" \
        || die "${archive}: layer ${layer_digests[i]} is not a readable tar archive: $(head -n1 "${tmp}/tar.err")"
done
awk -v FS_OUT=$'\x1f' '
function quoted(s, start,    i, c, out) { # the C-quoted string opening at s[start], still quoted
    out = ""
    for (i = start + 1; i <= length(s); i++) {
        c = substr(s, i, 1)
        if (c == "\\") { out = out c substr(s, i + 1, 1); i++; continue }
        if (c == "\"") return out
        out = out c
    }
    bad = "unterminated name in: " s
    exit 1
}
function modebits(p,    m, i, c) {
    m = 0
    for (i = 2; i <= 10; i++) {
        c = substr(p, i, 1)
        if (c == "r" || c == "w" || c == "x" || c == "s" || c == "t") m += bit[i]
        if ((c == "s" || c == "S") && i == 4) m += 2048
        if ((c == "s" || c == "S") && i == 7) m += 1024
        if ((c == "t" || c == "T") && i == 10) m += 512
    }
    return m
}
BEGIN {
    bit[2] = 256; bit[3] = 128; bit[4] = 64; bit[5] = 32; bit[6] = 16; bit[7] = 8
    bit[8] = 4; bit[9] = 2; bit[10] = 1
    count = 0
}
/^@LAYER / { layer = $2; next }
{
    if (length($1) != 10 || index($2, "/") == 0 || index($0, "\"") == 0) { bad = "unexpected listing line: " $0; exit 1 }
    name = quoted($0, index($0, "\""))
    key = name
    sub(/^[.\/]+/, "", key); sub(/\/+$/, "", key); key = "/" key
    base = key; sub(/.*\//, "", base)
    if (substr(base, 1, 4) == ".wh.") {
        dir = key; sub(/\/[^\/]*$/, "", dir); if (dir == "") dir = "/"
        target = (dir == "/" ? "/" : dir "/") substr(base, 5)
        for (k in alive) if (k == target || substr(k, 1, length(target) + 1) == target "/") delete alive[k]
        next
    }
    split($2, owner, "/")
    if (!(key in alive)) { order[++count] = key; alive[key] = count }
    row[key] = key FS_OUT substr($1, 1, 1) FS_OUT sprintf("%o", modebits($1)) FS_OUT owner[1] FS_OUT owner[2] \
        FS_OUT ($3 ~ /^[0-9]+$/ ? $3 : 0) FS_OUT layer FS_OUT name
}
END {
    if (bad != "") { print bad > "/dev/stderr"; exit 1 }
    for (i = 1; i <= count; i++) if (order[i] in alive && alive[order[i]] == i) print row[order[i]]
}' "${tmp}/listing" >"${tmp}/files" 2>"${tmp}/awk.err" \
    || die "${archive}: cannot list the layers: $(head -n1 "${tmp}/awk.err")"

declare -A ftype=() fmode=() fuid=() fgid=() fsize=() flayer=() fname=()
keys=()
while IFS=$'\x1f' read -r key t m u g s l nm; do
    keys+=("${key}")
    ftype[${key}]=${t} fmode[${key}]=${m} fuid[${key}]=${u} fgid[${key}]=${g} fsize[${key}]=${s}
    flayer[${key}]=${l} fname[${key}]=${nm}
done <"${tmp}/files"

summary() {
    local k regular=0
    for k in "${keys[@]}"; do
        [[ ${ftype[${k}]} != - ]] || regular=$((regular + fsize[${k}]))
    done
    awk -v id="${config_digest}" -v l="${layers_size}" -v n="${#layer_digests[@]}" -v u="${regular}" -v e="${#keys[@]}" \
        'BEGIN { printf "ID %s, size %.0f bytes compressed (%.1f MB, %d layer(s)), %.1f MB of files, %d entries\n", id, l, l / 1e6, n, u / 1e6, e }'
}
if ((summary_only)); then
    summary
    exit 0
fi

# The contents of the regular files: extracted per layer (regular files only, so no root is needed),
# each read where its last entry put it. fpath[key]: the file on disk; elf[key]: 1 if it starts with
# \x7fELF.
is_file() { [[ ${ftype[$1]} == [-CS] ]]; }
declare -A fpath=() elf=()
for ((i = 0; i < ${#layer_digests[@]}; i++)); do
    mkdir "${tmp}/l${i}"
    # members<i>: the names to extract, decoded from the C quoting, NUL-separated; paths<i>: key and
    # name pairs, NUL-separated. A name with a .. component (tar would not extract it) is refused.
    awk -F $'\x1f' -v layer="${i}" -v paths="${tmp}/paths${i}" '
    function unquote(s,    out, i, c, n, j) {
        out = ""
        for (i = 1; i <= length(s); i++) {
            c = substr(s, i, 1)
            if (c != "\\") { out = out c; continue }
            c = substr(s, ++i, 1)
            if (c ~ /[0-7]/) {
                n = 0
                for (j = 0; j < 3 && substr(s, i, 1) ~ /[0-7]/; j++) { n = n * 8 + substr(s, i, 1); i++ }
                i--
                out = out sprintf("%c", n)
            } else out = out (c in esc ? esc[c] : c)
        }
        return out
    }
    BEGIN {
        esc["a"] = "\a"; esc["b"] = "\b"; esc["f"] = "\f"; esc["n"] = "\n"; esc["r"] = "\r"; esc["t"] = "\t"; esc["v"] = "\v"
        printf "" > paths
    }
    $7 == layer && $2 ~ /^[-CS]$/ {
        name = unquote($8)
        if (("/" name "/") ~ /\/\.\.\//) { print "a name with a .. component: " $8 > "/dev/stderr"; exit 1 }
        printf "%s%c", name, 0
        printf "%s%c%s%c", $1, 0, name, 0 > paths
    }' "${tmp}/files" >"${tmp}/members${i}" 2>"${tmp}/awk.err" || die "${archive}: $(head -n1 "${tmp}/awk.err")"
    [[ -s ${tmp}/members${i} ]] || continue
    tar -xf "${tmp}/layer${i}" -C "${tmp}/l${i}" --no-same-owner --no-same-permissions --null --verbatim-files-from \
        -T "${tmp}/members${i}" 2>"${tmp}/tar.err" || true
    chmod -R u+rwX "${tmp}/l${i}"
    while IFS= read -r -d '' k && IFS= read -r -d '' nm; do
        while [[ ${nm} == /* ]]; do nm=${nm#/}; done
        p="${tmp}/l${i}/${nm}"
        [[ -f ${p} && ! -L ${p} ]] || die "${archive}: cannot read ${k} from layer ${layer_digests[i]}: $(head -n1 "${tmp}/tar.err")"
        fpath[${k}]=${p}
        h=''
        IFS= read -r -d '' -N 4 h <"${p}" || true
        if [[ ${h} == $'\x7fELF' && "$(od -An -N4 -tx1 "${p}" | tr -d ' \n')" == 7f454c46 ]]; then elf[${k}]=1; fi
    done <"${tmp}/paths${i}"
done

# --- the checks ---------------------------------------------------------------------------------------
failures=0
check() { # check OK WHAT: OK is 0 (true) or anything else
    if [[ $1 == 0 ]]; then
        printf '[image-check] ok: %s\n' "$2"
    else
        printf '[image-check] FAIL: %s\n' "$2"
        failures=$((failures + 1))
    fi
}
verify() { # verify WHAT COMMAND...: check that COMMAND succeeds
    local what=$1
    shift
    if "$@"; then check 0 "${what}"; else check 1 "${what}"; fi
}
# shellcheck source=words.sh
source "${here}/words.sh"
# The same for names of the image, which are already escaped (C quoting) but for the quote.
pynames() {
    local out='' w
    for w in "$@"; do out+="${out:+, }'${w//\'/\\\'}'"; done
    REPLY="[${out}]"
}

# config: one "0|1 <what>" line per check, from jq.
jq -r --argjson plan "${plan}" '
  def pystr: gsub("\\\\"; "\\\\") | gsub("\n"; "\\n") | gsub("\r"; "\\r") | gsub("\t"; "\\t")
    | if test("\u0027") and (test("\"") | not) then "\"" + . + "\""
      else "\u0027" + gsub("\u0027"; "\\\u0027") + "\u0027" end;
  def pyrepr: if type == "string" then pystr elif type == "null" then "None"
    elif type == "boolean" then (if . then "True" else "False" end)
    elif type == "array" then "[" + (map(pyrepr) | join(", ")) + "]"
    elif type == "object" then "{" + (to_entries | map("\(.key | pystr): \(.value | pyrepr)") | join(", ")) + "}"
    else tostring end;
  def items: to_entries | sort_by(.key) | map("(\(.key | pystr), \(.value | pystr))") | "[" + join(", ") + "]";
  def ok(c): if c then "0" else "1" end;
  def orbase(v; d): if v == null or v == "" then d else v end;
  $plan.runtime as $rt
  | (.config // {}) as $cfg
  | ({PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      SSL_CERT_FILE: "/etc/ssl/certs/ca-certificates.crt"} + $rt.env) as $want_env
  | (reduce ($cfg.Env // [])[] as $e ({}; . + {($e | split("=")[0]): ($e | split("=")[1:] | join("="))})) as $got_env
  | orbase($rt.user; "65532") as $user
  | orbase($rt.workdir; "/home/nonroot") as $workdir
  | (($cfg.ExposedPorts // {}) | keys) as $ports
  | ($cfg.Labels // {}) as $labels
  | "\(ok($got_env == $want_env)) Env \($got_env | items) == base + ENV \($want_env | items)",
    "\(ok($cfg.User == $user)) User \($cfg.User | pyrepr) == \($user | pyrepr)",
    "\(ok($cfg.WorkingDir == $workdir)) WorkingDir \($cfg.WorkingDir | pyrepr) == \($workdir | pyrepr)",
    "\(ok($ports == ($rt.expose | sort))) ExposedPorts \($ports | pyrepr) == EXPOSE \($rt.expose | sort | pyrepr)",
    "\(ok($cfg.Entrypoint == $rt.entrypoint)) Entrypoint \($cfg.Entrypoint | pyrepr) == ENTRYPOINT \($rt.entrypoint | pyrepr)",
    "\(ok($cfg.Cmd == $rt.cmd)) Cmd \($cfg.Cmd | pyrepr) == CMD \($rt.cmd | pyrepr)",
    "\(ok(all($rt.labels | to_entries[]; $labels[.key] == .value))) Labels include LABEL \($rt.labels | pyrepr)",
    "\(ok(.os == "linux" and .architecture == "amd64")) platform linux/amd64"
' "${config}" >"${tmp}/config-checks" 2>"${tmp}/jq.err" || die "${archive}: cannot read the config: $(head -n1 "${tmp}/jq.err")"
while IFS= read -r line; do
    check "${line%% *}" "${line#* }"
done <"${tmp}/config-checks"

# The C quoting of a path of this machine, to look it up among the image's names.
cquote() {
    REPLY="$(printf '%s' "$1" | od -An -v -tu1 | awk '
        BEGIN { e[7] = "a"; e[8] = "b"; e[9] = "t"; e[10] = "n"; e[11] = "v"; e[12] = "f"; e[13] = "r" }
        { for (i = 1; i <= NF; i++) {
              c = $i + 0
              if (c == 34 || c == 92) printf "\\%c", c
              else if (c in e) printf "\\%s", e[c]
              else if (c < 32 || c > 126) printf "\\%03o", c
              else printf "%c", c } }')"
}
cargo_version() { # version = "..." of the first [package] table of $1/Cargo.toml, else None
    [[ -r $1/Cargo.toml ]] || die "$1/Cargo.toml: cannot be read"
    awk '{ text = text "\n" $0 }
    END {
        start = 1
        while ((i = index(substr(text, start), "\n[package]")) > 0) {
            after = substr(text, start + i - 1 + 10)
            b = index(after, "[")
            if (match(after, /\nversion[ \t\n\r\f\v\034\035\036\037]*=[ \t\n\r\f\v\034\035\036\037]*"[^"]+"/) && (b == 0 || RSTART < b)) {
                v = substr(after, RSTART, RLENGTH); sub(/^[^"]*"/, "", v); sub(/"$/, "", v); print v; exit
            }
            start += i
        }
        print "None"
    }' "$1/Cargo.toml"
}
strip_ws() {
    local s=$1 ws=$' \t\n\v\f\r\x1c\x1d\x1e\x1f'
    s=${s#"${s%%[!${ws}]*}"}
    REPLY=${s%"${s##*[!${ws}]}"}
}

# COPYs
declare -A binaries=()
ncopies="$(jq '.runtime.copies | length' <<<"${plan}")"
for ((c = 0; c < ncopies; c++)); do
    {
        IFS= read -r -d '' from_null
        IFS= read -r -d '' from
        IFS= read -r -d '' src
        IFS= read -r -d '' dest
        IFS= read -r -d '' chmod_
    } < <(jq -j --argjson c "${c}" '.runtime.copies[$c] | (.from == null | tostring), (.from // ""), .src, .dest, (.chmod // "")
        | . + "\u0000"' <<<"${plan}")
    if [[ ${from_null} == true ]]; then
        if [[ ${src} == /* ]]; then hsrc=${src}; else hsrc="${root}/${src}"; fi
        d=${dest}
        while [[ ${d} == */ ]]; do d=${d%/}; done
        [[ -n ${d} ]] || d=/
        if [[ -d ${hsrc} ]]; then
            if [[ -n ${chmod_} ]]; then
                [[ ${chmod_} =~ ^[0-7]+$ ]] || die "COPY --chmod=${chmod_}: not an octal mode"
                want_mode=$((8#${chmod_}))
            fi
            declare -A expected=()
            exp_keys=()
            while IFS= read -r -d '' hp; do
                rel=${hp#"${hsrc%/}"/}
                if [[ ${d} == / ]]; then ip="/${rel}"; else ip="${d}/${rel}"; fi
                cquote "${ip}"
                expected[${REPLY}]=${hp}
                exp_keys+=("${REPLY}")
            done < <(find "${hsrc%/}/" -mindepth 1 ! -xtype d -print0)
            bad=()
            if ((${#exp_keys[@]})); then mapfile -t exp_keys < <(printf '%s\n' "${exp_keys[@]}" | sort); fi
            for ip in "${exp_keys[@]}"; do
                hp=${expected[${ip}]}
                if [[ -z ${chmod_} ]]; then want_mode=$((8#$(stat -L -c %a "${hp}" 2>/dev/null || echo 0))); fi
                hsum="$(sha256sum <"${hp}" 2>/dev/null)" || hsum=unreadable
                if [[ -z ${ftype[${ip}]+set} ]] || ! is_file "${ip}" \
                    || [[ "$(sha256sum <"${fpath[${ip}]}")" != "${hsum}" ]] \
                    || [[ ${fuid[${ip}]} != 0 || ${fgid[${ip}]} != 0 || $((8#${fmode[${ip}]})) != "${want_mode}" ]]; then
                    bad+=("${ip}")
                fi
            done
            extra=()
            for k in "${keys[@]}"; do
                if [[ ${k} == "${d}/"* && -z ${expected[${k}]+set} && ${ftype[${k}]} != d ]]; then extra+=("${k}"); fi
            done
            what="COPY ${src} ${dest}: ${#exp_keys[@]} files, same bytes and modes, owned by root"
            if ((${#bad[@]})); then pynames "${bad[@]:0:5}"; what+=" (differ: ${REPLY})"; fi
            if ((${#extra[@]})); then pynames "${extra[@]:0:5}"; what+=" (unexpected: ${REPLY})"; fi
            check "$((${#bad[@]} + ${#extra[@]}))" "${what}"
            unset expected
        else
            check 1 "COPY ${src}: only directories of the build context are checked"
        fi
    else
        if [[ ${dest} == */ ]]; then dst="${dest}${src##*/}"; else dst=${dest}; fi
        cquote "${dst}"
        k=${REPLY}
        strip_it="$(jq -r --arg s "${src}" '.build.artifacts[$s].strip' <<<"${plan}")"
        if [[ -z ${ftype[${k}]+set} || -z ${elf[${k}]+set} ]]; then
            check 1 "COPY --from=${from} ${src} ${dst}: an ELF file in the image"
            continue
        fi
        binaries[${k}]=1
        f=${fpath[${k}]}
        m=$((8#${fmode[${k}]}))
        verify "${dst}: owned by root, mode 0o${fmode[${k}]} executable by everyone" \
            test "${fuid[${k}]}:${fgid[${k}]}:$((m & 8#111))" == "0:0:$((8#111))"
        # Program headers: a PT_INTERP one means a dynamic loader; section names: .symtab.
        if readelf -lW "${f}" >"${tmp}/phdrs" 2>/dev/null; then
            check "$(awk '$1 == "INTERP" { i = 1 } END { print i + 0 }' "${tmp}/phdrs")" \
                "${dst}: statically linked (no program interpreter)"
        else
            check 1 "${dst}: statically linked (no program interpreter) (readelf cannot read its program headers)"
        fi
        if [[ ${strip_it} == true ]]; then
            if readelf -SW "${f}" >"${tmp}/shdrs" 2>/dev/null; then
                check "$(awk '{ sub(/^ *\[ *[0-9]+\] */, "") } $1 == ".symtab" { s = 1 } END { print s + 0 }' "${tmp}/shdrs")" \
                    "${dst}: stripped, as the build stage does (strip ${src}); ${fsize[${k}]} bytes"
            else
                check 1 "${dst}: stripped, as the build stage does (strip ${src}); readelf cannot read its sections"
            fi
        fi
        cp "${f}" "${tmp}/binary"
        chmod 0755 "${tmp}/binary"
        out="$(timeout 30 "${tmp}/binary" --version 2>/dev/null)" || true
        strip_ws "${out}"
        out=${REPLY}
        want="poolguard $(cargo_version "${root}")"
        pylist "${out}"
        got_repr=${REPLY:1:-1}
        pylist "${want}"
        verify "${dst} --version: ${got_repr} == ${REPLY:1:-1}" test "${out}" == "${want}"
    fi
done

# the base
has_text() { # has_text PATH ERE: the file's text (a regular file under 1 MiB, or an ELF) has a matching line
    local k=$1
    [[ -n ${ftype[${k}]+set} ]] && is_file "${k}" && [[ ${fsize[${k}]} -lt 1048576 || -n ${elf[${k}]+set} ]] \
        && grep -aEq "$2" "${fpath[${k}]}"
}
is_dir() { # is_dir PATH MODE(octal) ID
    [[ -n ${ftype[$1]+set} && ${ftype[$1]} == d && ${fmode[$1]} == "$2" && ${fuid[$1]} == "$3" && ${fgid[$1]} == "$3" ]]
}
verify "/etc/passwd: nonroot 65532:65532, home /home/nonroot" has_text /etc/passwd '^nonroot:x:65532:65532:[^:]*:/home/nonroot:'
verify "/etc/group: nonroot 65532" has_text /etc/group '^nonroot:x:65532:'
verify "/home/nonroot: 0700, owned by 65532" is_dir /home/nonroot 700 65532
verify "/tmp: 1777" is_dir /tmp 1777 0
verify "/root: 0700" is_dir /root 700 0
bundle=/etc/ssl/certs/ca-certificates.crt
certs=0
if has_text "${bundle}" ''; then certs="$(grep -ao 'BEGIN CERTIFICATE' "${fpath[${bundle}]}" | wc -l)"; fi
check "$((certs > 50 ? 0 : 1))" "${bundle}: ${certs} certificates"
for p in /usr/share/zoneinfo/UTC /etc/services /etc/protocols /etc/mime.types /etc/nsswitch.conf /etc/os-release; do
    verify "${p} present" test -n "${ftype[${p}]+set}"
done

# nothing else runs
elves=()
for k in "${!elf[@]}"; do [[ -n ${binaries[${k}]+set} ]] || elves+=("${k}"); done
what="no ELF file besides the copied binaries"
if ((${#elves[@]})); then
    mapfile -t elves < <(printf '%s\n' "${elves[@]}" | sort)
    pynames "${elves[@]:0:5}"
    what+=" (found ${REPLY})"
fi
check "${#elves[@]}" "${what}"
shells=()
for p in /bin/sh /bin/bash /usr/bin/sh /bin/busybox /usr/bin/dpkg /usr/bin/apt; do
    [[ -z ${ftype[${p}]+set} ]] || shells+=("${p}")
done
what="no shell, no package manager"
if ((${#shells[@]})); then pynames "${shells[@]}"; what+=" (found ${REPLY})"; fi
check "${#shells[@]}" "${what}"

printf '[image-check] %s\n' "$(summary)"
if ((failures)); then
    printf '[image-check] %d failed\n' "${failures}"
    exit 1
fi
echo "[image-check] the image matches the Dockerfile"
