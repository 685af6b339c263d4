#!/usr/bin/env bash
# `megatron` itself (src/cli/main.c's table of subcommands): the usage text lists every
# subcommand, help exits 0 on stdout, no command exits 2 with the usage on stderr, an unknown
# command is one line naming the commands and the closest one, and every subcommand answers
# --help with exit 0.
cd "$(dirname "$0")/../.." || exit 1
. tests/cli/lib.sh

commands="train preprocess data generate plan bench convert"
for h in help --help -h; do
    out=$("$MEGATRON" $h 2>/dev/null); rc=$?
    missing=""
    for c in $commands help; do grep -qE "^  $c +[a-z]" <<<"$out" || missing="$missing $c"; done
    if [ "$rc" -ne 0 ] || ! grep -q '^usage: megatron <command> \[flags\]$' <<<"$out" || [ -n "$missing" ]; then
        fail "usage_$h" "exit $rc, missing:$missing" "$out"
    else pass "usage_$h"; fi
done

err=$("$MEGATRON" 2>&1 >/dev/null); rc=$?
if [ "$rc" -eq 2 ] && grep -q '^usage: megatron' <<<"$err"; then pass no_command_usage_exit_2
else fail no_command_usage_exit_2 "exit $rc" "$err"; fi

list="commands: train, preprocess, data, generate, plan, bench, convert, help"
expect_error unknown_command_suggests 2 "^megatron: error: unknown command 'trian'; $list; did you mean 'train'\?$" trian
expect_error unknown_command_suggests_plan 2 "unknown command 'plna'; $list; did you mean 'plan'\?$" plna
expect_error unknown_command_far 2 "^megatron: error: unknown command 'xyzzy'; $list$" xyzzy

for c in $commands; do
    out=$("$MEGATRON" $c --help 2>/dev/null); rc=$?
    if [ "$rc" -eq 0 ] && [ -n "$out" ]; then pass "${c}_help"; else fail "${c}_help" "exit $rc"; fi
done
finish
