# Sourced by dockerfile.sh and check.sh.
# A word list for messages, each word quoted: ['a', 'b'] (in REPLY).
pylist() {
    local out='' w
    for w in "$@"; do
        w=${w//\\/\\\\}
        out+="${out:+, }'${w//\'/\\\'}'"
    done
    REPLY="[${out}]"
}
