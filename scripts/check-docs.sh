#!/usr/bin/env bash
# Checks that the repository's references resolve inside it:
# - every rule id cited in code, tests, README, BENCHMARKS or docs (SOTW-21, REG-6, G-3, H-RAW;
#   also the short forms SOTW-30/31 and SOTW-1..37) is defined in docs/protocol.md;
# - every `ecosystem.md §N` cited has a section N in docs/ecosystem.md;
# - relative Markdown links in docs/, README and BENCHMARKS resolve (file and anchor);
# - nothing points at documents outside the repository (the team's former shared folder).
# Prints what is missing and exits 1; exits 0 when everything resolves.
set -euo pipefail
cd "$(dirname "$0")/.."

protocol=docs/protocol.md
ecosystem=docs/ecosystem.md
where=(src registries load tests fuzz benches scripts README.md BENCHMARKS.md docs)
status=0

# Rule ids, with "/n" lists and "..n" ranges expanded. A definition in protocol.md is the id in
# bold: **SOTW-21**.
cited=$(git grep -ohE '\b(SOTW|DELTA|TRANS|REG|SEC|BUG|INV|G)-[0-9]+[a-z]?((/|\.\.)[0-9]+[a-z]?)*' \
    -- "${where[@]}" ":!$protocol" |
  while IFS= read -r ref; do
    prefix=${ref%%-*}
    rest=${ref#*-}
    while [[ $rest =~ ^([0-9]+)\.\.([0-9]+)(.*)$ ]]; do
      for ((n = BASH_REMATCH[1]; n <= BASH_REMATCH[2]; n++)); do echo "$prefix-$n"; done
      rest=${BASH_REMATCH[3]#/}
      [ -z "$rest" ] && continue 2
    done
    tr '/' '\n' <<<"$rest" | grep -E '^[0-9]' | sed "s/^/$prefix-/"
  done
  git grep -ohE '\bH-[A-Z]{3,}\b' -- "${where[@]}" ":!$protocol")
for id in $(sort -u <<<"$cited"); do
  if ! grep -qF "**$id**" "$protocol"; then
    echo "rule $id is cited but not defined in $protocol" >&2
    status=1
  fi
done

# `ecosystem.md §1.2` needs a heading "## 1." / "### 1.2 ..." in docs/ecosystem.md.
for sec in $(git grep -ohE 'ecosystem(\.md)? §[0-9]+(\.[0-9]+)*' -- "${where[@]}" | sed 's/.*§//' | sort -u); do
  if ! grep -qE "^#+ ${sec//./\\.}[. ]" "$ecosystem"; then
    echo "ecosystem.md §$sec is cited but $ecosystem has no such section" >&2
    status=1
  fi
done

# Relative Markdown links in docs/ and the top-level documents point at files that exist, and a
# `file.md#anchor` at an explicit <a id="anchor"> or a heading of that file.
for doc in docs/*.md README.md BENCHMARKS.md; do
  dir=$(dirname "$doc")
  for link in $(grep -oE '\]\([^)#:]*(#[^)]*)?\)' "$doc" | sed -E 's/^\]\((.*)\)$/\1/'); do
    file=${link%%#*}
    target=$doc
    if [ -n "$file" ]; then
      target=$dir/$file
      if [ ! -e "$target" ]; then
        echo "$doc links to $link, which does not exist" >&2
        status=1
        continue
      fi
    fi
    case $link in *'#'*) ;; *) continue ;; esac
    anchor=${link#*#}
    # A heading's anchor: lower case, punctuation dropped, spaces as dashes (GitHub's rule).
    if ! grep -qF "<a id=\"$anchor\">" "$target" &&
      ! grep -E '^#+ ' "$target" | sed -E 's/^#+ //' | tr 'A-Z' 'a-z' |
        sed -E 's/[^a-z0-9 _-]//g; s/ /-/g' | grep -qxF "$anchor"; then
      echo "$doc links to $link, but $target has no such anchor" >&2
      status=1
    fi
  done
done

# Paths into the team's former shared folder (spelled so this script does not match itself).
if git grep -n 'shared''/' -- . ; then
  echo "the lines above point outside the repository; cite docs/ instead" >&2
  status=1
fi

if [ "$status" = 0 ]; then
  echo "docs: $(sort -u <<<"$cited" | wc -l) cited rule ids defined in $protocol; references resolve"
fi
exit "$status"
