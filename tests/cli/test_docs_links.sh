#!/usr/bin/env bash
# Every relative link of README.md and docs/*.md resolves inside the repository: the file or
# directory exists, and a #fragment names a heading of the target page (GitHub's anchors:
# lowercased, punctuation but '-' and '_' dropped, spaces as '-'). Links to web addresses are not
# followed. One PASS/FAIL line per page; a failure lists each dead link with its line number.
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/../.." || exit 1

# anchors PAGE: the anchors of PAGE's headings (outside code fences), one per line
anchors() {
    awk '/^```/ { fence = !fence; next } !fence && /^#+ / { sub(/^#+ +/, ""); print }' "$1" |
        tr 'A-Z' 'a-z' | sed -e 's/[^a-z0-9 _-]//g' -e 's/ /-/g'
}

# links PAGE: "LINE TARGET" for every markdown link [text](target) outside code fences
links() {
    awk '/^```/ { fence = !fence; next }
         !fence {
             s = $0
             while (match(s, /\]\([^) ]+\)/)) {
                 print NR, substr(s, RSTART + 2, RLENGTH - 3)
                 s = substr(s, RSTART + RLENGTH)
             }
         }' "$1"
}

for page in README.md docs/*.md; do
    [ -f "$page" ] || continue
    dir=$(dirname "$page")
    dead=() n=0
    while read -r line target; do
        case $target in http://* | https://* | mailto:*) continue ;; esac
        n=$((n + 1))
        path=${target%%#*} frag=
        [[ $target == *#* ]] && frag=${target#*#}
        if [ -z "$path" ]; then file=$page; else file=$dir/$path; fi
        if [ ! -e "$file" ]; then
            dead+=("$page:$line: $target (no such file: $file)")
        elif [ -n "$frag" ] && [[ $file == *.md ]] && ! anchors "$file" | grep -qxF -- "$frag"; then
            dead+=("$page:$line: $target (no heading #$frag in $file)")
        fi
    done < <(links "$page")
    if [ ${#dead[@]} -eq 0 ]; then
        pass "docs_links ${page}: $n relative links resolve"
    else
        fail "docs_links ${page}" "${dead[@]}"
    fi
done
finish
