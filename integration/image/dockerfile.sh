#!/usr/bin/env bash
# Turn poolguard's Dockerfile into the plan that build.sh carries out and that check.sh holds an
# image against, so that the build without Docker is derived from the Dockerfile and cannot drift
# from it unnoticed.
#
#   integration/image/dockerfile.sh [Dockerfile]     # the plan, as JSON, on stdout
#
# The plan has two parts:
#   build    the stage the runtime stage copies from: its name, WORKDIR, the arguments of the
#            `cargo build` in its RUN, and each artifact it makes with `cp SRC DEST` (keyed by DEST)
#            with whether a `strip DEST` follows;
#   runtime  the last stage: its base (only a distroless static nonroot base, from any registry,
#            is known), its COPYs (from, src, dest, chown, chmod, line), USER, EXPOSE (as
#            port/proto), ENTRYPOINT, CMD (exec form only), ENV, WORKDIR and LABEL.
# Whatever the build without Docker could not reproduce (another instruction in the runtime stage,
# a COPY from a stage that is not the build stage or of a file it does not make, a shell-form
# CMD, another base, FROM flags, ...) ends the program with a one-line error on stderr and status 1:
#   [image] error: <Dockerfile>: line N: <what>
# Words are split as a POSIX shell would split them without expansions (quotes and backslashes);
# continuation lines are joined and comment lines dropped, also inside a continued instruction.
# Needs bash, jq and awk; integration/image/test.sh exercises it.
set -euo pipefail
export LC_ALL=C

path="${1:-Dockerfile}"
fail() {
    printf '[image] error: %s: %s\n' "${path}" "$*" >&2
    exit 1
}
command -v jq >/dev/null 2>&1 || fail "jq is missing (Debian: apt-get install -y jq)"

# The base the runtime stage must name: what build.sh lays out from Debian packages.
known_base_suffix=/distroless/static:nonroot
runtime_keys=" COPY USER EXPOSE ENTRYPOINT CMD ENV WORKDIR LABEL ARG "
# Blanks: space, tab, LF, VT, FF, CR and the ASCII separators 0x1c-0x1f.
ws=$' \t\n\v\f\r\x1c\x1d\x1e\x1f'

strip() { # $1 -> REPLY without leading and trailing blanks
    local s=$1
    s=${s#"${s%%[!${ws}]*}"}
    s=${s%"${s##*[!${ws}]}"}
    REPLY=$s
}

blank_split() { # $1 -> fields[]: split on runs of blanks
    local s=${1//[${ws}]/ }
    read -r -a fields <<<"${s}" || true
}

# shellcheck source=words.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/words.sh"

# Split $2 into words[] as POSIX shlex does: blanks separate words; '...' is literal; in "..." a
# backslash escapes only " and \; elsewhere a backslash escapes any character. $1: line number.
split_words() {
    local n=$1 s=$2 i c state=ws back=word tok=''
    words=()
    for ((i = 0; i < ${#s}; i++)); do
        c=${s:i:1}
        case ${state} in
        ws | word)
            case ${c} in
            ' ' | $'\t' | $'\r' | $'\n')
                if [[ ${state} == word ]]; then
                    words+=("${tok}")
                    tok=''
                    state=ws
                fi
                ;;
            \\) back=word state=esc ;;
            "'") state=sq ;;
            '"') state=dq ;;
            *) tok+=${c} state=word ;;
            esac
            ;;
        sq)
            if [[ ${c} == "'" ]]; then state=word; else tok+=${c}; fi
            ;;
        dq)
            case ${c} in
            '"') state=word ;;
            \\) back=dq state=esc ;;
            *) tok+=${c} ;;
            esac
            ;;
        esc)
            if [[ ${back} == dq && ${c} != '"' && ${c} != \\ ]]; then tok+=\\; fi
            tok+=${c}
            state=${back}
            ;;
        esac
    done
    case ${state} in
    word) words+=("${tok}") ;;
    sq | dq) fail "line ${n}: no closing quotation in: ${s}" ;;
    esc) fail "line ${n}: no escaped character after the final backslash in: ${s}" ;;
    esac
}

# The exec (JSON) form of ENTRYPOINT/CMD, compacted -> REPLY. $1 line, $2 keyword, $3 text.
exec_form() {
    local n=$1 kw=$2 rest=$3 err
    [[ ${rest} == '['* ]] || fail "line ${n}: ${kw} in shell form is not supported (the image has no shell)"
    if ! err=$(jq -cs 'if length == 1 then .[0] else "extra data after the array\n" | halt_error(1) end' \
        <<<"${rest}" 2>&1 >/dev/null); then
        err=${err#parse error: }
        fail "line ${n}: ${kw} is not a valid JSON array: ${err%$'\n'}"
    fi
    REPLY=$(jq -cs '.[0]' <<<"${rest}")
    jq -e 'type == "array" and all(.[]; type == "string")' >/dev/null <<<"${REPLY}" \
        || fail "line ${n}: ${kw} must be an array of strings"
}

# --- the instructions: one per logical line ---------------------------------------------------------
if [[ ! -e ${path} ]]; then fail "no such file"; fi
if [[ -d ${path} ]]; then fail "is a directory"; fi
[[ -r ${path} ]] || fail "cannot be read (permission denied)"
if command -v iconv >/dev/null 2>&1 && ! iconv -f UTF-8 -t UTF-8 "${path}" >/dev/null 2>&1; then
    fail "is not valid UTF-8"
fi
# Line breaks: CR LF, CR, LF, VT, FF, FS, GS, RS and Unicode's NEL, LS, PS.
mapfile -t lines < <(awk 'BEGIN { RS = "\r\n|[\r\n\v\f\034\035\036]|\302\205|\342\200[\250\251]" } { print }' "${path}")

ins_line=() ins_kw=() ins_rest=()
buf='' start=0
for ((k = 0; k < ${#lines[@]}; k++)); do
    strip "${lines[k]}"
    line=${REPLY}
    if [[ -z ${buf} && (-z ${line} || ${line} == '#'*) ]]; then continue; fi
    if [[ -n ${buf} && ${line} == '#'* ]]; then continue; fi
    [[ -n ${buf} ]] || start=$((k + 1))
    if [[ ${line} == *\\ ]]; then
        buf+="${line%\\} "
        continue
    fi
    buf+=${line}
    if [[ ${buf} == *' '* ]]; then
        kw=${buf%%' '*}
        strip "${buf#*' '}"
    else
        kw=${buf}
        REPLY=''
    fi
    ins_line+=("${start}") ins_kw+=("${kw^^}") ins_rest+=("${REPLY}")
    buf=''
done
[[ -z ${buf} ]] || fail "the Dockerfile ends inside a continued line"

# --- the stages ------------------------------------------------------------------------------------
arg_keys=()
declare -A arg_val=()
st_line=() st_image=() st_named=() st_name=() st_first=() st_end=()
for ((k = 0; k < ${#ins_kw[@]}; k++)); do
    n=${ins_line[k]} kw=${ins_kw[k]} rest=${ins_rest[k]}
    if [[ ${kw} == ARG && ${#st_line[@]} -eq 0 ]]; then
        strip "${rest%%=*}"
        key=${REPLY}
        if [[ ${rest} == *=* ]]; then strip "${rest#*=}"; else REPLY=''; fi
        [[ -n ${arg_val[k:${key}]+set} ]] || arg_keys+=("${key}")
        arg_val[k:${key}]=${REPLY}
        continue
    fi
    if [[ ${kw} == FROM ]]; then
        blank_split "${rest}"
        flags=() plain=()
        for w in "${fields[@]}"; do
            if [[ ${w} == --* ]]; then flags+=("${w}"); else plain+=("${w}"); fi
        done
        if ((${#flags[@]})); then
            pylist "${flags[@]}"
            fail "line ${n}: FROM flags ${REPLY} are not supported by the local build"
        fi
        ((${#plain[@]})) || fail "line ${n}: FROM names no image"
        image=${plain[0]}
        for key in "${arg_keys[@]}"; do
            v=${arg_val[k:${key}]}
            image=${image//"\${${key}}"/"${v}"}
            image=${image//"\$${key}"/"${v}"}
        done
        if ((${#st_end[@]})); then st_end[-1]=${k}; fi
        st_line+=("${n}") st_image+=("${image}") st_first+=($((k + 1))) st_end+=(${#ins_kw[@]})
        if [[ ${#plain[@]} -eq 3 && ${plain[1]^^} == AS ]]; then
            st_named+=(1) st_name+=("${plain[2]}")
        else
            st_named+=(0) st_name+=('')
        fi
        continue
    fi
    ((${#st_line[@]})) || fail "line ${n}: ${kw} before the first FROM"
done
((${#st_line[@]} >= 2)) || fail "expected a build stage and a runtime stage"
rt=$((${#st_line[@]} - 1))

# --- which stage the runtime stage copies from -------------------------------------------------------
declare -A froms=()
for ((k = st_first[rt]; k < st_end[rt]; k++)); do
    [[ ${ins_kw[k]} == COPY ]] || continue
    split_words "${ins_line[k]}" "${ins_rest[k]}"
    for w in "${words[@]}"; do
        if [[ ${w} == --from=* ]]; then froms[k:${w#--from=}]=1; fi
    done
done
if ((${#froms[@]} > 1)); then
    fail "the runtime stage copies from ${#froms[@]} stages; the local build knows one"
fi
src_stage=$((rt - 1))
if ((${#froms[@]} == 1)); then
    from_name=("${!froms[@]}")
    from_name[0]=${from_name[0]#k:}
    src_stage=-1
    for ((s = 0; s < ${#st_line[@]}; s++)); do
        if [[ ${st_named[s]} == 1 && ${st_name[s]} == "${from_name[0]}" ]]; then src_stage=${s}; fi
    done
    ((src_stage >= 0)) || fail "the runtime stage copies from unknown stage ${from_name[0]}"
fi

# The plan is assembled by jq from records of four fields: kind, a, b, c (passed with an x in
# front of each, as jq 1.6 would take a value starting with -- for an option).
rec=()

# --- the build stage -----------------------------------------------------------------------------
b_workdir=/ have_cargo=0
art_dests=()
declare -A art_src=() stripped=()
for ((k = st_first[src_stage]; k < st_end[src_stage]; k++)); do
    n=${ins_line[k]} kw=${ins_kw[k]} rest=${ins_rest[k]}
    case ${kw} in
    WORKDIR) b_workdir=${rest} ;;
    RUN)
        steps=()
        s=${rest}
        while [[ ${s} == *'&&'* ]]; do
            steps+=("${s%%'&&'*}")
            s=${s#*'&&'}
        done
        steps+=("${s}")
        for step in "${steps[@]}"; do
            strip "${step}"
            split_words "${n}" "${REPLY}"
            if [[ ${#words[@]} -ge 2 && ${words[0]} == cargo && ${words[1]} == build ]]; then
                ((!have_cargo)) || fail "line ${n}: more than one cargo build in the build stage"
                have_cargo=1
                for w in "${words[@]:2}"; do rec+=(cargo_arg "${w}" '' ''); done
            elif [[ ${#words[@]} -eq 3 && ${words[0]} == cp ]]; then
                [[ -n ${art_src[k:${words[2]}]+set} ]] || art_dests+=("${words[2]}")
                art_src[k:${words[2]}]=${words[1]}
            elif [[ ${#words[@]} -eq 2 && ${words[0]} == strip ]]; then
                stripped[k:${words[1]}]=1
            fi
        done
        ;;
    esac
done
((have_cargo)) || fail "the build stage (line ${st_line[src_stage]}) has no \`cargo build\`"
rec+=(build_name "${st_named[src_stage]}" "${st_name[src_stage]}" '' build_workdir "${b_workdir}" '' '')
for d in "${art_dests[@]}"; do
    rec+=(artifact "${d}" "${art_src[k:${d}]}" "$([[ -n ${stripped[k:${d}]+set} ]] && echo true || echo false)")
done
if [[ ${st_named[src_stage]} == 1 ]]; then b_name=${st_name[src_stage]}; else b_name=None; fi

# --- the runtime stage -----------------------------------------------------------------------------
base=${st_image[rt]}
if [[ ${base} != *"${known_base_suffix}" ]]; then
    fail "line ${st_line[rt]}: the runtime stage is FROM ${base}; the local build only knows a base ending in ${known_base_suffix}"
fi
rec+=(base "${base}" '' '')
for ((k = st_first[rt]; k < st_end[rt]; k++)); do
    n=${ins_line[k]} kw=${ins_kw[k]} rest=${ins_rest[k]}
    [[ ${runtime_keys} == *" ${kw} "* ]] || fail "line ${n}: ${kw} in the runtime stage is not supported by the local build"
    case ${kw} in
    COPY)
        split_words "${n}" "${rest}"
        declare -A opt=()
        while ((${#words[@]})) && [[ ${words[0]} == --* ]]; do
            w=${words[0]#--}
            words=("${words[@]:1}")
            key=${w%%=*}
            if [[ ${w} == *=* ]]; then v=${w#*=}; else v=''; fi
            [[ ${key} == from || ${key} == chown || ${key} == chmod ]] \
                || fail "line ${n}: COPY --${key} is not supported by the local build"
            opt[${key}]=${v}
        done
        ((${#words[@]} == 2)) \
            || fail "line ${n}: COPY with $((${#words[@]} - 1)) sources is not supported (one source, one destination)"
        if [[ -v opt[from] ]]; then
            [[ ${st_named[src_stage]} == 1 && ${opt[from]} == "${b_name}" ]] \
                || fail "line ${n}: COPY --from=${opt[from]}: only the build stage '${b_name}' is known"
            if [[ -z ${art_src[k:${words[0]}]+set} ]]; then
                known=()
                ((${#art_dests[@]} == 0)) || mapfile -t known < <(printf '%s\n' "${art_dests[@]}" | sort)
                pylist "${known[@]}"
                fail "line ${n}: COPY --from=${opt[from]} ${words[0]}: the build stage makes no such file with \`cp\` (known: ${REPLY})"
            fi
        fi
        # copy: line, then "0"/"1"+value for from, chown and chmod, then src and dest.
        rec+=(copy "${n}" "${words[0]}" "${words[1]}")
        for key in from chown chmod; do
            if [[ -v opt[${key}] ]]; then rec+=("copy_${key}" 1 "${opt[${key}]}" ''); else rec+=("copy_${key}" 0 '' ''); fi
        done
        unset opt
        ;;
    USER) rec+=(user "${rest}" '' '') ;;
    EXPOSE)
        blank_split "${rest}"
        for p in "${fields[@]}"; do
            [[ ${p} == */* ]] || p+=/tcp
            rec+=(expose "${p}" '' '')
        done
        ;;
    ENTRYPOINT | CMD)
        exec_form "${n}" "${kw}" "${rest}"
        rec+=("${kw,,}" "${REPLY}" '' '')
        ;;
    ENV | LABEL)
        split_words "${n}" "${rest}"
        for w in "${words[@]}"; do
            if [[ ${w} != *=* ]]; then
                [[ ${kw} == LABEL ]] || fail "line ${n}: ENV must use key=value"
                rec+=(label "${w}" '' '')
            else
                rec+=("${kw,,}" "${w%%=*}" "${w#*=}" '')
            fi
        done
        ;;
    WORKDIR) rec+=(workdir "${rest}" '' '') ;;
    esac
done

jq -n '
  [$ARGS.positional | map(.[1:]) as $p | range(0; $p | length; 4) | $p[. : . + 4]]
  | reduce .[] as [$kind, $a, $b, $c] (
      {build: {name: null, workdir: "/", cargo_args: [], artifacts: {}},
       runtime: {base: null, copies: [], user: null, expose: [], entrypoint: null, cmd: null,
                 env: {}, workdir: null, labels: {}}};
      if $kind == "build_name" then .build.name = (if $a == "1" then $b else null end)
      elif $kind == "build_workdir" then .build.workdir = $a
      elif $kind == "cargo_arg" then .build.cargo_args += [$a]
      elif $kind == "artifact" then .build.artifacts[$a] = {src: $b, strip: ($c == "true")}
      elif $kind == "base" then .runtime.base = $a
      elif $kind == "copy" then
        .runtime.copies += [{line: ($a | tonumber), from: null, src: $b, dest: $c, chown: null, chmod: null}]
      elif ($kind | startswith("copy_")) then
        if $a == "1" then .runtime.copies[-1][$kind[5:]] = $b else . end
      elif $kind == "user" then .runtime.user = $a
      elif $kind == "expose" then .runtime.expose += [$a]
      elif $kind == "entrypoint" or $kind == "cmd" then .runtime[$kind] = ($a | fromjson)
      elif $kind == "env" then .runtime.env[$a] = $b
      elif $kind == "label" then .runtime.labels[$a] = $b
      elif $kind == "workdir" then .runtime.workdir = $a
      else error("unknown record \($kind)") end)
' --args "${rec[@]/#/x}"
