"""Dockerfiles in the common subset become Debian recipes; everything else is refused with the
file, the line and the reason. The Dockerfiles are the kind a task author writes (continuation
lines with comments inside, heredocs, ARG defaults, ``--chmod``), and the refused ones what a
careless or hostile one would hand over.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from assay.errors import SuiteError
from assay.suites.dockerfile import dockerfile_recipe, parse_instructions
from assay.suites.limits import DOCKERFILE_MAX_BYTES
from assay.suites.recipe import Recipe, recipe_digest

#: ``recipe_digest`` of a small recipe with an ``apt`` step, computed before ``recommends``.
RECIPE_DIGEST_BEFORE_RECOMMENDS = (
    "sha256:6f10104e42bf2e5ebc7ea0ec0875c7cdc0df869623b5e4cf2341c5ade8813659")

REALISTIC = """\
# syntax=docker/dockerfile:1
ARG PY=3.12
FROM python:${PY}-slim AS base

ARG PANDAS_VERSION=2.2.3
ENV DEBIAN_FRONTEND=noninteractive \\
    PYTHONUNBUFFERED=1
RUN apt-get update && apt-get install -y --no-install-recommends \\
        git \\
        # jq is for the tests' fixtures
        jq curl=7.88.1-10+deb12u8 \\
    && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir pandas==${PANDAS_VERSION} "numpy>=1.26"
WORKDIR /app
COPY app/ /app/
COPY --chmod=0755 tools/run.sh /usr/local/bin/
COPY data.csv /data/
RUN <<EOF
set -e
python -c 'import pandas' > /dev/null
echo ready > /app/state.txt
EOF
COPY <<EOF /etc/motd
pandas ${PANDAS_VERSION}
EOF
RUN chmod +x /app/main.py && mkdir -p /app/out && echo "v=$PANDAS_VERSION" | tee /app/v
RUN apt-get install -y sqlite3
USER nobody
CMD ["python", "main.py"]
"""


def context(tmp_path: Path, dockerfile: str, name: str = "Dockerfile") -> Path:
    (tmp_path / "app").mkdir(exist_ok=True)
    (tmp_path / "app" / "main.py").write_text("print('hi')\n")
    (tmp_path / "tools").mkdir(exist_ok=True)
    (tmp_path / "tools" / "run.sh").write_text("#!/bin/sh\nexec python /app/main.py\n")
    (tmp_path / "data.csv").write_text("a,b\n1,2\n")
    path = tmp_path / name
    path.write_text(dockerfile)
    return path


def refused(path: Path, **kw: dict[str, str]) -> list[tuple[int | None, str]]:
    with pytest.raises(SuiteError) as info:
        dockerfile_recipe(path, **kw)  # type: ignore[arg-type]
    assert all(p.path == path for p in info.value.problems)
    return [(p.line, p.message) for p in info.value.problems]


def test_a_realistic_dockerfile_becomes_the_expected_recipe(tmp_path: Path) -> None:
    path = context(tmp_path, REALISTIC)
    recipe, ctx = dockerfile_recipe(path)
    assert ctx == tmp_path
    assert recipe == Recipe.model_validate({
        "suite": "bookworm",
        # the python image's interpreter, `python` and pip; then the leading apt-get line
        "packages": ["python3", "python3-pip", "python3-venv", "python-is-python3", "git",
                     "jq", "curl=7.88.1-10+deb12u8"],
        "python": "3.12",
        "pip": ["pandas==2.2.3", "numpy>=1.26"],
        "env": {"PIP_BREAK_SYSTEM_PACKAGES": "1", "UV_BREAK_SYSTEM_PACKAGES": "1"},
        "steps": [
            {"env": {"DEBIAN_FRONTEND": "noninteractive", "PYTHONUNBUFFERED": "1"}},
            {"workdir": "/app"},
            {"copy": {"src": "app", "dest": "/app"}},
            {"copy": {"src": "tools/run.sh", "dest": "/usr/local/bin/run.sh", "mode": "0755"}},
            {"copy": {"src": "data.csv", "dest": "/data/data.csv"}},
            {"run": "set -e\npython -c 'import pandas' > /dev/null\n"
                    "echo ready > /app/state.txt\n"},
            {"run": "mkdir -p /etc && cat > /etc/motd <<'ASSAY_EOF'\npandas 2.2.3\nASSAY_EOF"},
            # the build argument the shell reads is exported, as Docker gives it to RUN
            {"run": "export PANDAS_VERSION=2.2.3\nchmod +x /app/main.py && mkdir -p /app/out "
                    "&& echo \"v=$PANDAS_VERSION\" | tee /app/v"},
            # after a RUN: installed in its place, not hoisted; no --no-install-recommends on
            # the line, so with its Recommends, as Docker's apt-get would
            {"apt": ["sqlite3"], "recommends": True},
            {"user": "nobody"},
        ],
        "workdir": "/app",
        "user": "nobody",
        "substitutions": ["FROM python:3.12-slim -> Debian bookworm's python3 3.11",
                          'line 29: CMD ["python", "main.py"] not run: assay starts every '
                          "process of a task itself"],
    })
    # the digest covers the copied files: an edited context file is a new build
    before = recipe_digest(recipe, ctx)
    (tmp_path / "app" / "main.py").write_text("print('changed')\n")
    assert recipe_digest(recipe, ctx) != before


def test_build_args_override_defaults_and_reach_from(tmp_path: Path) -> None:
    path = context(tmp_path, REALISTIC)
    recipe, _ = dockerfile_recipe(path, build_args={"PY": "3.13", "PANDAS_VERSION": "2.1.0"})
    assert recipe.python == "3.13" and recipe.pip[0] == "pandas==2.1.0"
    assert recipe.substitutions[0] == "FROM python:3.13-slim -> Debian bookworm's python3 3.11"


@pytest.mark.parametrize(("base", "suite", "packages", "substitution"), [
    ("debian:bookworm-slim", "bookworm", [], None),
    ("debian:12", "bookworm", [], "FROM debian:12 -> Debian bookworm"),
    ("debian:trixie", "trixie", [], None),
    ("ubuntu:22.04", "bookworm", [], "FROM ubuntu:22.04 -> Debian bookworm"),
    ("ubuntu:24.04", "trixie", [], "FROM ubuntu:24.04 -> Debian trixie"),
    ("docker.io/library/python:3.11-bookworm", "bookworm",
     ["python3", "python3-pip", "python3-venv", "python-is-python3", "build-essential",
      "ca-certificates", "curl", "git", "procps", "wget"],
     "FROM docker.io/library/python:3.11-bookworm -> Debian bookworm's python3 3.11 with "
     "build-essential ca-certificates curl git procps wget"),
    ("python:3.13-slim-trixie", "trixie",
     ["python3", "python3-pip", "python3-venv", "python-is-python3"],
     "FROM python:3.13-slim-trixie -> Debian trixie's python3 3.13"),
    ("public.ecr.aws/docker/library/python:3.13-slim-bookworm@sha256:" + "ab" * 32,
     "bookworm", ["python3", "python3-pip", "python3-venv", "python-is-python3"],
     "FROM public.ecr.aws/docker/library/python:3.13-slim-bookworm@sha256:" + "ab" * 32
     + " -> Debian bookworm's python3 3.11 (the digest sha256:" + "ab" * 32
     + " is not reproduced: Debian's archive is)"),
    ("ghcr.io/astral-sh/uv:python3.12-bookworm-slim", "bookworm",
     ["python3", "python3-pip", "python3-venv", "python-is-python3"],
     "FROM ghcr.io/astral-sh/uv:python3.12-bookworm-slim -> Debian bookworm's python3 3.11 "
     "and uv from PyPI"),
])
def test_bases_and_what_was_substituted(tmp_path: Path, base: str, suite: str,
                                        packages: list[str], substitution: str | None) -> None:
    path = context(tmp_path, f"FROM {base}\nWORKDIR /app\n")
    recipe, _ = dockerfile_recipe(path)
    assert (recipe.suite, recipe.packages) == (suite, packages)
    assert recipe.substitutions == ([substitution] if substitution else [])
    assert recipe.pip == (["uv"] if "astral-sh/uv" in base else [])


def test_recommends_follow_each_apt_line_as_docker_installs_them(tmp_path: Path) -> None:
    """apt (and so Docker) installs Recommends unless the line says --no-install-recommends;
    mmdebstrap never does, so a line that wants them is a step, never hoisted into packages."""
    path = context(tmp_path, (
        "FROM debian:bookworm-slim\n"
        "RUN apt-get update && apt-get install -y --no-install-recommends git\n"
        "RUN apt-get update && apt-get install -y curl && rm -rf /var/lib/apt/lists/*\n"
        "RUN echo built > /built\n"
        "RUN apt-get install -qy --no-install-recommends jq\n"
        "RUN DEBIAN_FRONTEND=noninteractive apt install -y wget\n"
        "RUN apt-get install -y --no-install-recommends --install-recommends make\n"
        "WORKDIR /app\n"))
    recipe, _ = dockerfile_recipe(path)
    assert recipe.packages == ["git"]  # the flagged line before any RUN: mmdebstrap's
    dumped = recipe.model_dump(mode="json", by_alias=True)["steps"]
    assert dumped == [
        {"workdir": "/"},
        {"apt": ["curl"], "recommends": True},
        {"run": "echo built > /built"},
        {"apt": ["jq"]},
        {"apt": ["wget"], "recommends": True},
        {"apt": ["make"], "recommends": True},  # the later flag wins, as in apt
        {"workdir": "/app"},
    ]


def test_recipes_without_recommends_keep_their_digest(tmp_path: Path) -> None:
    """The field is left out of the digested form when false: a recipe written before it
    existed names the same build (this digest was computed before the field was added)."""
    recipe = Recipe.model_validate({"suite": "bookworm", "packages": ["python3"],
                                    "steps": [{"apt": ["tree"]}, {"run": "true"}]})
    assert recipe_digest(recipe, None) == RECIPE_DIGEST_BEFORE_RECOMMENDS
    asked = Recipe.model_validate({"suite": "bookworm", "packages": ["python3"],
                                   "steps": [{"apt": ["tree"], "recommends": True},
                                             {"run": "true"}]})
    assert recipe_digest(asked, None) != RECIPE_DIGEST_BEFORE_RECOMMENDS


def test_ubuntu_version_pins_are_dropped_and_said(tmp_path: Path) -> None:
    path = context(tmp_path, "FROM ubuntu:22.04\nRUN apt-get update && apt-get install -y "
                   "--no-install-recommends curl=7.81.0-1ubuntu1.16 python3\nWORKDIR /srv\n")
    recipe, _ = dockerfile_recipe(path)
    assert recipe.packages == ["curl", "python3"]
    assert recipe.substitutions == [
        "FROM ubuntu:22.04 -> Debian bookworm",
        "line 2: apt-get install curl=7.81.0-1ubuntu1.16 -> curl (Debian's version: the pin "
        "names another distribution's)"]


def test_five_dockerfiles_outside_the_subset_are_refused_with_line_and_reason(
        tmp_path: Path) -> None:
    cases = {
        "multi": ("FROM python:3.12 AS build\nRUN pip wheel . -w /wheels\n"
                  "FROM python:3.12-slim\nCOPY --from=build /wheels /wheels\n",
                  [(3, "a second FROM: multi-stage builds are not in the subset"),
                   (4, "COPY --from is not in the subset (it copies from another stage")]),
        "url": ("FROM debian:bookworm\nWORKDIR /app\n"
                "ADD https://example.com/data.tar.gz /app/\n",
                [(3, "ADD https://example.com/data.tar.gz: a download at build time is not "
                     "in the subset")]),
        "alpine": ("FROM alpine:3.20\nRUN apk add --no-cache python3\n",
                   [(1, "FROM alpine:3.20: not a Debian or Python base")]),
        "mount": ("FROM python:3.12-slim\nWORKDIR /app\n"
                  "RUN --mount=type=cache,target=/root/.cache pip install numpy\n",
                  [(3, "RUN --mount is not in the subset (a build-time mount needs "
                       "BuildKit")]),
        "unknown": ("FROM debian:bookworm\nONBUILD RUN echo hi\n"
                    "HEALTHCHECK CMD curl -f http://localhost/ || exit 1\nFROBNICATE now\n",
                    [(2, "ONBUILD: ONBUILD acts on another Dockerfile's build"),
                     (3, "HEALTHCHECK: a health check of a running container service"),
                     (4, "FROBNICATE: not a Dockerfile instruction in the subset")]),
        "archive": ("FROM debian:bookworm\nADD data.tar.gz /srv/\n",
                    [(2, "ADD data.tar.gz: ADD unpacks a local archive")]),
        "centos": ("FROM centos:7\n", [(1, "FROM centos:7: not a Debian or Python base")]),
        "escape": ("FROM debian:bookworm\nCOPY ../secret.txt /x\n",
                   [(2, "COPY ../secret.txt: outside the build context")]),
        "unexpanded": ("FROM debian:bookworm\nARG P=/a\nWORKDIR ${P#/}\n",
                       [(3, "${P#/}: only ${NAME}")]),
    }
    for name, (text, want) in cases.items():
        d = tmp_path / name
        d.mkdir()
        (d / "data.tar.gz").write_bytes(b"\x1f\x8b")
        got = refused(context(d, text))
        assert len(got) == len(want), (name, got)
        for (line, msg), (wline, wmsg) in zip(got, want, strict=True):
            assert line == wline and msg.startswith(wmsg), (name, got)


def test_continuation_lines_and_heredocs_keep_their_line_numbers(tmp_path: Path) -> None:
    text = ("FROM debian:bookworm\n"           # 1
            "RUN echo a \\\n"                   # 2
            "  # inside\n"                      # 3
            "\n"                                # 4
            "  && echo b\n"                     # 5
            "RUN <<EOF\n"                       # 6
            "FROM inside a heredoc is data\n"   # 7
            "EOF\n"                             # 8
            "RUN cat <<-'A' > /x && cat <<B > /y\n"  # 9
            "\tone $HOME\n"                     # 10
            "\tA\n"                             # 11
            "two\n"                             # 12
            "B\n"                               # 13
            "BOGUS\n")                          # 14
    path = context(tmp_path, text)
    ins = parse_instructions(path, text)
    assert [(i.line, i.keyword) for i in ins] == [(1, "FROM"), (2, "RUN"), (6, "RUN"),
                                                  (9, "RUN"), (14, "BOGUS")]
    assert ins[1].text == "echo a   && echo b"
    assert ins[2].heredocs[0].body == "FROM inside a heredoc is data\n"
    assert [(d.name, d.body, d.quoted, d.strip_tabs) for d in ins[3].heredocs] == [
        ("A", "\tone $HOME\n", True, True), ("B", "two\n", False, False)]
    assert refused(path) == [(14, "BOGUS: not a Dockerfile instruction in the subset")]
    path.write_text(text.replace("BOGUS\n", ""))
    recipe, _ = dockerfile_recipe(path)
    assert [s.model_dump(by_alias=True) for s in recipe.steps] == [
        {"workdir": "/"},  # RUN before any WORKDIR runs at / as in Docker
        {"run": "echo a && echo b"},
        {"run": "FROM inside a heredoc is data\n"},
        # a RUN with heredocs after a command is already shell: kept as written
        {"run": "cat <<-'A' > /x && cat <<B > /y\n\tone $HOME\nA\ntwo\nB"},
    ]
    assert recipe.workdir == "/work" and recipe.substitutions == [
        "no WORKDIR other than /: the image's working directory is /work (a workspace cannot "
        "be mounted at /)"]
    path.write_text("FROM debian:bookworm\nRUN <<EOF\necho never closed\n")
    assert refused(path) == [(2, "the heredoc <<EOF opened here is never closed by a line EOF")]


def test_arg_and_env_substitution_follows_docker(tmp_path: Path) -> None:
    text = ("ARG BASE=debian:bookworm\nFROM ${BASE}\nARG BASE\nARG DIR=/srv/${BASE:+x}\n"
            "ENV HOME_DIR=${DIR}/home OTHER=\"a b\" LIT='$DIR'\nENV LEGACY value with spaces\n"
            "WORKDIR $HOME_DIR\nWORKDIR sub\nCOPY data.csv ${UNSET:-fallback}/\n"
            "RUN pip3 install \"requests==${NOPE}\"\n")
    recipe, _ = dockerfile_recipe(context(tmp_path, text))
    steps = [s.model_dump(by_alias=True) for s in recipe.steps]
    assert steps[0] == {"env": {"HOME_DIR": "/srv/x/home", "OTHER": "a b", "LIT": "$DIR"}}
    assert steps[1] == {"env": {"LEGACY": "value with spaces"}}
    assert steps[2:5] == [{"workdir": "/srv/x/home"}, {"workdir": "/srv/x/home/sub"},
                          {"copy": {"src": "data.csv",
                                    "dest": "/srv/x/home/sub/fallback/data.csv",
                                    "mode": None}}]
    # an unknown variable leaves the line to the shell, where Docker leaves it
    assert steps[5] == {"run": 'pip3 install "requests==${NOPE}"'}
    assert recipe.workdir == "/srv/x/home/sub" and recipe.pip == []


def test_exec_form_shell_and_pip_forms(tmp_path: Path) -> None:
    text = ("FROM python:3.11-slim\nWORKDIR /app\nCOPY data.csv .\n"
            "RUN [\"python\", \"-c\", \"print('x y')\"]\n"
            "RUN python -m pip install -U 'scikit-learn>=1.4' && pip install -r req.txt\n"
            "SHELL [\"/bin/bash\", \"-o\", \"pipefail\", \"-c\"]\nRUN ls | wc -l\n"
            "LABEL maintainer=x\nEXPOSE 8000\n")
    recipe, _ = dockerfile_recipe(context(tmp_path, text))
    steps = [s.model_dump(by_alias=True) for s in recipe.steps]
    assert steps[2:] == [
        {"run": "python -c 'print('\"'\"'x y'\"'\"')'"},
        {"pip": ["scikit-learn>=1.4"]},
        {"run": "pip install -r req.txt"},  # a requirements file stays the shell's
        {"run": "/bin/bash -o pipefail -c 'ls | wc -l'"},
    ]
    assert steps[1] == {"copy": {"src": "data.csv", "dest": "/app/data.csv", "mode": None}}


def test_a_huge_or_binary_dockerfile_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "Dockerfile"
    path.write_bytes(b"FROM debian:bookworm\n" + b"RUN true\n" * (DOCKERFILE_MAX_BYTES // 9))
    [(line, msg)] = refused(path)
    assert "over the 1 MiB limit" in msg
    path.write_bytes(b"FROM debian:bookworm\nRUN echo \xff\n")
    [(line, msg)] = refused(path)
    assert line == 2 and "not valid UTF-8" in msg
    empty = tmp_path / "empty"
    empty.mkdir()
    assert refused(context(empty, "# nothing\n")) == [
        (None, "no FROM: nothing says what to build on")]


def test_uvs_documented_copy_from_and_path_from_the_base_image(tmp_path: Path) -> None:
    text = ("FROM python:3.12-slim\nCOPY --from=ghcr.io/astral-sh/uv:0.8.15 /uv /uvx /bin/\n"
            "ENV VIRTUAL_ENV=/opt/venv\nENV PATH=\"/opt/venv/bin:$PATH\"\nWORKDIR /app\n"
            "COPY --from=ghcr.io/astral-sh/uv:latest /uv /usr/local/bin/\n")
    recipe, _ = dockerfile_recipe(context(tmp_path, text))
    assert recipe.pip == ["uv==0.8.15", "uv"]
    assert recipe.substitutions[1:] == [
        "line 2: COPY --from=ghcr.io/astral-sh/uv:0.8.15 /uv /uvx -> uv==0.8.15 from PyPI (uv "
        "and uvx on PATH)",
        "line 6: COPY --from=ghcr.io/astral-sh/uv:latest /uv -> uv from PyPI (uv and uvx on "
        "PATH)"]
    # $PATH is the base image's, as Docker expands it, never an empty string
    assert recipe.steps[1].model_dump() == {"env": {
        "PATH": "/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}
    # any other image's files are still refused
    path = context(tmp_path, "FROM python:3.12-slim\nCOPY --from=ghcr.io/astral-sh/uv:0.8 "
                   "/etc/passwd /x\n")
    assert refused(path) == [(2, "COPY --from is not in the subset (it copies from another "
                                 "stage or image)")]


def test_an_entrypoint_that_starts_a_service_is_said_not_run(tmp_path: Path) -> None:
    text = ("FROM debian:bookworm\nWORKDIR /srv\nCOPY data.csv .\n"
            "ENTRYPOINT [\"/entrypoint.sh\"]\nCMD [\"sleep\", \"infinity\"]\n")
    recipe, _ = dockerfile_recipe(context(tmp_path, text))
    assert recipe.substitutions == ["line 4: ENTRYPOINT [\"/entrypoint.sh\"] not run: assay "
                                    "starts every process of a task itself"]


def test_a_cmd_that_starts_services_through_a_shell_is_said_not_run(tmp_path: Path) -> None:
    """A public Harbor task's CMD started its mock services with ``bash -c "... && sleep
    infinity"``; an earlier check took every CMD beginning with ``bash`` for idling and said
    nothing. Only what idles (or gives a bare shell) goes unmentioned."""
    lines = ['CMD ["bash", "-c", "python3 /srv/mock.py & sleep infinity"]',
             'CMD bash /start.sh', 'ENTRYPOINT ["/bin/sh", "-c", "nginx && tail -f /dev/null"]',
             'CMD ["sleep", "infinity"]', 'CMD ["/bin/bash"]', 'CMD tail -f /dev/null',
             'CMD ["bash", "-c", "sleep infinity"]', "CMD sh -c 'tail -F /dev/null'"]
    text = "FROM debian:bookworm\nWORKDIR /srv\nCOPY data.csv .\n" + "\n".join(lines) + "\n"
    recipe, _ = dockerfile_recipe(context(tmp_path, text))
    said = [s.split(":", 1)[0] for s in recipe.substitutions]
    assert said == ["line 4", "line 5", "line 6"], recipe.substitutions
    assert all(s.endswith("not run: assay starts every process of a task itself")
               for s in recipe.substitutions)


def test_a_symlink_out_of_the_context_and_a_setuid_mode_are_not_carried(
        tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret\n")
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "link.txt").symlink_to(secret)
    path = context(ctx, "FROM debian:bookworm\nWORKDIR /app\nCOPY link.txt /app/\n"
                   "COPY --chmod=4755 data.csv /usr/local/bin/tool\n")
    assert refused(path) == [(3, "COPY link.txt: leads outside the build context")]
    path.write_text("FROM debian:bookworm\nWORKDIR /app\n"
                    "COPY --chmod=4755 data.csv /usr/local/bin/tool\n")
    recipe, _ = dockerfile_recipe(path)
    assert recipe.steps[1].model_dump(by_alias=True) == {"copy": {
        "src": "data.csv", "dest": "/usr/local/bin/tool", "mode": "0755"}}
    assert recipe.substitutions == ["line 3: COPY --chmod=4755 -> 0755 (no setuid, setgid or "
                                    "sticky bit in an image)"]
