#!/usr/bin/env python3
"""Writes docs/flags.md: every Megatron-LM training flag we know, with what megatron.c does with it.

    python3 tools/reference/flags_doc.py MEGATRON_LM_DIR [BUILD/megatron] > docs/flags.md

MEGATRON_LM_DIR is a Megatron-LM checkout (git clone https://github.com/NVIDIA/Megatron-LM; its
megatron/ directory is read; from a bare clone: git -C CLONE archive HEAD megatron | tar -x -C
DIR). Megatron's flags are those of megatron/training/arguments.py: its add_argument calls, and
the groups ArgumentGroupFactory builds from configuration dataclasses (one flag per field:
--field-name, or --no-field-name and --disable-field-name for a bool whose default is True, or the
names the field's argparse_meta gives; excluded and init=False fields have none).

Our side comes from `megatron train --help`, whose lines carry the status: no tag (implemented),
[no effect here] (accepted: it tunes Megatron's Python internals or selects what this build always
does; the help text says why), [not yet] (recognised, only its default accepted), [only V]
(`megatron plan` takes any value, `megatron train` runs only V) or [retired] (a spelling Megatron
retired: refused with Megatron's words or the flag that replaced it). A Megatron flag missing from
our help is "not yet" (refused as an unknown flag). The test tests/unit/test_flags.c checks that the
committed file lists every flag of our table with its status, so the document cannot drift from the
code.
"""
import ast
import os
import re
import subprocess
import sys


def literal(node, default=None):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return default


def dataclasses_in(root):
    """Every class defined under root/megatron: name -> (ClassDef, base names). First one wins."""
    classes = {}
    for d, _, files in os.walk(os.path.join(root, "megatron")):
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            try:
                tree = ast.parse(open(os.path.join(d, f)).read())
            except (SyntaxError, UnicodeDecodeError):
                continue
            for node in tree.body:
                if isinstance(node, ast.ClassDef) and node.name not in classes:
                    bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
                    classes[node.name] = (node, bases)
    return classes


def is_bool(annotation):
    """bool, Optional[bool] or bool | None."""
    if isinstance(annotation, ast.Name):
        return annotation.id == "bool"
    if isinstance(annotation, ast.Subscript) and getattr(annotation.value, "id", "") == "Optional":
        return is_bool(annotation.slice)
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        parts = [annotation.left, annotation.right]
        return any(is_bool(p) for p in parts) and all(
            is_bool(p) or (isinstance(p, ast.Constant) and p.value is None) for p in parts)
    return False


def field_flags(stmt):
    """The flag names of one dataclass field (an AnnAssign), as ArgumentGroupFactory makes them;
    None for a field with init=False."""
    name = stmt.target.id
    default, meta_names = None, None
    value = stmt.value
    if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "field":
        for kw in value.keywords:
            if kw.arg == "default":
                default = literal(kw.value)
            elif kw.arg == "init" and literal(kw.value) is False:
                return None
            elif kw.arg == "metadata" and isinstance(kw.value, ast.Dict):
                for k, v in zip(kw.value.keys, kw.value.values):
                    if literal(k) == "argparse_meta" and isinstance(v, ast.Dict):
                        for mk, mv in zip(v.keys, v.values):
                            if literal(mk) == "arg_names":
                                meta_names = literal(mv)
    elif value is not None:
        default = literal(value)
    if meta_names:
        return list(meta_names)
    flag = "--" + name.replace("_", "-")
    if is_bool(stmt.annotation) and default is True:
        return ["--no-" + flag[2:], "--disable-" + flag[2:]]
    return [flag]


def factory_flags(classes, cls, exclude):
    """The flags of dataclass `cls` and its bases (base fields first)."""
    if cls not in classes:
        return []
    node, bases = classes[cls]
    flags = []
    for b in bases[:1]:
        flags += factory_flags(classes, b, exclude)
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if stmt.target.id in exclude:
                continue
            names = field_flags(stmt)
            if names:
                flags += names
    return flags


def exclude_list(call, func):
    """The exclude= argument of an ArgumentGroupFactory call: a list, or a name assigned a list
    in the enclosing function."""
    for kw in call.keywords:
        if kw.arg != "exclude":
            continue
        if isinstance(kw.value, ast.Name) and func is not None:
            for n in ast.walk(func):
                if isinstance(n, ast.Assign) and any(
                        isinstance(t, ast.Name) and t.id == kw.value.id for t in n.targets):
                    return set(literal(n.value, []))
        return set(literal(kw.value, []))
    return set()


def title_of(call):
    for kw in call.keywords:
        if kw.arg == "title":
            return literal(kw.value)
    strings = [literal(a) for a in call.args if isinstance(a, ast.Constant)]
    return strings[0] if strings else None


def megatron_flags(root):
    """flag -> Megatron's group title, from arguments.py and the dataclasses it turns into flags."""
    path = os.path.join(root, "megatron", "training", "arguments.py")
    tree = ast.parse(open(path).read())
    classes = dataclasses_in(root)
    flags = {}
    for func in [n for n in tree.body if isinstance(n, ast.FunctionDef)]:
        group = "other"
        factories = {}  # variable -> (class, exclude)
        calls = sorted((n for n in ast.walk(func) if isinstance(n, ast.Call)),
                       key=lambda n: (n.lineno, n.col_offset))
        for call in calls:
            fn = call.func
            attr = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            if attr == "add_argument_group":
                group = title_of(call) or group
            elif attr == "ArgumentGroupFactory" and call.args:
                cls = getattr(call.args[0], "id", None)
                factories[id(call)] = (cls, exclude_list(call, func))
            elif attr == "build_group":
                group = title_of(call) or group
                owner = fn.value
                if isinstance(owner, ast.Call):  # ArgumentGroupFactory(C).build_group(...)
                    cls = getattr(owner.args[0], "id", None)
                    excl = exclude_list(owner, func)
                else:  # factory = ArgumentGroupFactory(C, ...); factory.build_group(...)
                    cls, excl = None, set()
                    for n in ast.walk(func):
                        if (isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and
                                getattr(n.value.func, "id", "") == "ArgumentGroupFactory" and
                                any(getattr(t, "id", None) == getattr(owner, "id", "")
                                    for t in n.targets)):
                            cls = getattr(n.value.args[0], "id", None)
                            excl = exclude_list(n.value, func)
                for f in factory_flags(classes, cls, excl):
                    flags.setdefault(f, group)
            elif attr == "add_argument":
                for a in call.args:
                    v = literal(a)
                    if isinstance(v, str) and re.match(r"^--[A-Za-z0-9][A-Za-z0-9_-]*$", v):
                        flags.setdefault(v, group)
    return flags


TAGS = (("[no effect here] ", "no effect here"), ("[not yet] ", "not yet"),
        ("[retired] ", "retired"))


def our_flags(binary):
    out = subprocess.run([binary, "train", "--help"], capture_output=True, text=True).stdout
    ours = {}
    group = None
    for line in out.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            group = line[:-1]
            continue
        # "  --flag ARG WORDS   default   help": metavariables are upper case ("[W] PREFIX ...")
        m = re.match(r"^  (--[A-Za-z0-9_-]+)((?: [A-Z0-9_.,|\[\]]+)*)\s{2,}(.*)$", line)
        if not m or group is None:
            continue
        flag, rest = m.group(1), m.group(3)
        parts = re.split(r"\s{2,}", rest, maxsplit=1)
        help_text = parts[1] if len(parts) > 1 else ""
        status = "implemented"
        for tag, name in TAGS:
            if help_text.startswith(tag):
                status, help_text = name, help_text[len(tag):]
        only = re.match(r"^\[only ([^\]]+)\] ", help_text)
        if only:
            status, help_text = "only " + only.group(1), help_text[only.end():]
        ours[flag] = (status, group, help_text)
    return ours


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    theirs = megatron_flags(args[0])
    ours = our_flags(args[1] if len(args) > 1 else "build/megatron")
    counts = {}
    rows = []
    for flag in sorted(set(theirs) | set(ours)):
        status, group, note = ours.get(flag, ("not yet", None, ""))
        if flag not in ours:
            note = "unknown here: refused with the closest flag's name"
        counts[status] = counts.get(status, 0) + 1
        where = group or theirs.get(flag, "")
        rows.append("| `%s` | %s | %s | %s |" % (flag, status, where, note.replace("|", "\\|")))
    print("# Megatron-LM's flags in megatron.c\n")
    print("Generated by `tools/reference/flags_doc.py` from Megatron-LM's "
          "`megatron/training/arguments.py` (with the configuration dataclasses it turns into "
          "flags) and `megatron train --help`; `tests/unit/test_flags.c` checks it against the "
          "flag table.\n")
    print("- **implemented**: Megatron's meaning.")
    print("- **no effect here**: accepted, and listed once at start-up; it tunes Megatron's "
          "Python internals or selects what this build always does (the note says why).")
    print("- **only V**: `megatron plan` takes any value; `megatron train` runs only V and "
          "refuses the others with the reason (the note).")
    print("- **retired**: a spelling Megatron-LM retired; refused with Megatron's words or the "
          "flag that replaced it.")
    print("- **not yet**: recognised or unknown; using it is a one-line error (a recognised flag "
          "accepts its default). Several refused flags on one command line are all listed.\n")
    print("Counts: " + ", ".join("%s %d" % (k, counts[k]) for k in sorted(counts)) + ".\n")
    print("| flag | status | group | note |")
    print("|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
