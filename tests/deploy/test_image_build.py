"""The container image's build, done for real without Docker (CI has no Docker daemon).

deploy/Dockerfile is parsed; a build context holding only what its build stage copies (minus
.dockerignore) is assembled; its RUN steps are reproduced (a wheel built from that context with the
project environment's setuptools, no network, installed into a fresh virtual environment that sees
the project environment's dependencies); then, from a directory outside the repository, that
environment passes deploy/check-image.sh's smoke checks. With a Docker daemon, check-image.sh runs
too.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pytest

REPO = Path(__file__).parents[2]
DOCKERFILE = REPO / "deploy" / "Dockerfile"
CHECK_IMAGE = REPO / "deploy" / "check-image.sh"
SMOKE = REPO / "deploy" / "image_smoke.py"
EXAMPLE_CONFIG = REPO / "deploy" / "examples" / "devicectl.toml"
PROJECT_PURELIB = sysconfig.get_paths()["purelib"]  # the project environment's dependencies


class BuildCheckError(Exception):
    """The Dockerfile asks for something this check cannot find or reproduce."""


@dataclass
class Stage:
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, keyword: str) -> list[str]:
        return [rest for kw, rest in self.instructions if kw == keyword]


def parse_dockerfile(text: str) -> list[Stage]:
    """Stages with their (KEYWORD, arguments) instructions; continuations joined, comments dropped."""
    stages: list[Stage] = []
    logical = re.sub(r"\\\n(\s*#[^\n]*\n)*", " ", text)
    for line in logical.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = rest.split()
            as_name = words[2] if len(words) == 3 and words[1].upper() == "AS" else str(len(stages))
            stages.append(Stage(as_name))
        elif stages:
            stages[-1].instructions.append((keyword, rest.strip()))
    if not stages:
        raise BuildCheckError("the Dockerfile has no FROM")
    return stages


def build_stage(stages: list[Stage]) -> tuple[Stage, str]:
    """The stage the final one copies its environment from, and the path it copies."""
    for rest in stages[-1].args("COPY"):
        words = shlex.split(rest)
        if words and words[0].startswith("--from="):
            name = words[0].removeprefix("--from=")
            for stage in stages:
                if stage.name == name:
                    return stage, words[1]
    raise BuildCheckError("the final stage copies nothing from a build stage")


def workdir(stage: Stage) -> PurePosixPath:
    dirs = stage.args("WORKDIR")
    return PurePosixPath(dirs[-1] if dirs else "/")


def stage_env(stage: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for rest in stage.args("ENV"):
        for word in shlex.split(rest):
            key, sep, value = word.partition("=")
            if not sep:
                raise BuildCheckError(f"ENV {rest!r}: only the KEY=VALUE form is understood")
            env[key] = value
    return env


def ignore_patterns(context: Path) -> list[re.Pattern[str]]:
    """.dockerignore as regular expressions over context-relative paths (`*`, `?`, `**`)."""
    path = context / ".dockerignore"
    patterns = []
    for raw in path.read_text().splitlines() if path.exists() else []:
        line = raw.strip().rstrip("/")
        if not line or line.startswith("#"):
            continue
        if line.startswith("!"):
            raise BuildCheckError(f".dockerignore exception {line!r} is not understood by this check")
        out = ""
        for part in re.split(r"(\*\*/|\*\*|\*|\?)", line.lstrip("/")):
            out += {"**/": "(.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(part, re.escape(part))
        patterns.append(re.compile(out))
    return patterns


def ignored(relative: PurePosixPath, patterns: list[re.Pattern[str]]) -> bool:
    prefixes = [PurePosixPath(*relative.parts[: i + 1]).as_posix() for i in range(len(relative.parts))]
    return any(p.fullmatch(prefix) for p in patterns for prefix in prefixes)


def assemble_context(stage: Stage, context: Path, root: Path) -> list[PurePosixPath]:
    """Copy what the stage's COPY lines name from `context` to `root` (the image's /); return the
    copied files, relative to the stage's WORKDIR."""
    patterns = ignore_patterns(context)
    base = workdir(stage)
    copied: list[PurePosixPath] = []

    def put(source: Path, relative: PurePosixPath, target: PurePosixPath) -> None:
        if ignored(relative, patterns):
            return
        if source.is_dir():
            for child in sorted(source.iterdir()):
                put(child, relative / child.name, target / child.name)
            return
        dest = root / target.relative_to("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, dest)
        copied.append(target.relative_to(base) if target.is_relative_to(base) else target)

    for rest in stage.args("COPY"):
        words = shlex.split(rest)
        if any(w.startswith("--") for w in words):
            raise BuildCheckError(f"COPY {rest!r}: flags are not understood by the build stage's check")
        *sources, target = words
        dest = base / target
        for name in sources:
            source = context / name
            if not source.exists():
                raise BuildCheckError(f"deploy/Dockerfile copies {name}, which does not exist")
            into_dir = target.endswith("/") or len(sources) > 1
            put(source, PurePosixPath(name), dest / source.name if into_dir and source.is_file() else dest)
    return copied


def reproduce_run_steps(stage: Stage, root: Path, env: dict[str, str]) -> Path:
    """Do what the stage's RUN lines do; return the environment they installed the project into."""
    venv: PurePosixPath | None = None
    installed = False
    for rest in stage.args("RUN"):
        for command in rest.split("&&"):
            argv = shlex.split(command)
            pip = f"{venv}/bin/pip" if venv else None
            match argv:
                case ["python" | "python3", "-m", "venv", path]:
                    venv = PurePosixPath(path)
                    run([sys.executable, "-m", "venv", "--without-pip", str(root / venv.relative_to("/"))])
                case [cmd, "install", "--upgrade", "pip"] if cmd == pip:
                    pass  # the project environment's pip does the installing (no network here)
                case [cmd, "install", "."] if cmd == pip and venv is not None:
                    install_project(root, venv, workdir(stage), env)
                    installed = True
                case _:
                    raise BuildCheckError(
                        f"the build stage runs {shlex.join(argv)!r}, which tests/deploy/test_image_build.py "
                        "cannot reproduce: teach it this step"
                    )
    if venv is None or not installed:
        raise BuildCheckError("the build stage never installs the project into a virtual environment")
    return root / venv.relative_to("/")


def install_project(root: Path, venv: PurePosixPath, source: PurePosixPath, env: dict[str, str]) -> None:
    """`pip install .`: a wheel built without network, installed without dependencies; then a
    .pth file lends the project environment's dependencies (after the wheel, so pip never sees
    the project environment's own install of devicectl)."""
    wheels = root / "wheels"
    src = root / source.relative_to("/")
    pip = [sys.executable, "-m", "pip"]
    run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(wheels), str(src)],
        env,
    )
    (wheel,) = wheels.glob("*.whl")
    python = root / venv.relative_to("/") / "bin" / "python"
    run([*pip, "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)], env)
    (Path(purelib(python)) / "project-dependencies.pth").write_text(PROJECT_PURELIB + "\n")


def purelib(python: Path) -> str:
    return run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip()


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """No PYTHON* or DEVICECTL_* settings from the caller, and no project environment on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "DEVICECTL_", "PIP_"))}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    env.update(extra or {})
    return env


def run(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None, stdin: str = "") -> str:
    done = subprocess.run(
        argv, env=clean_env(env), cwd=cwd, input=stdin, capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise BuildCheckError(f"{shlex.join(argv)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout


@dataclass(frozen=True)
class Built:
    root: Path  # the build stage's filesystem (its / )
    src: Path  # its WORKDIR, where the context was copied
    copied: list[PurePosixPath]  # what the COPY lines brought, relative to WORKDIR
    wheel: Path
    venv: Path
    outside: Path  # a working directory outside the repository


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("image-root")
    stage, _ = build_stage(parse_dockerfile(DOCKERFILE.read_text()))
    try:
        copied = assemble_context(stage, REPO, root)
        venv = reproduce_run_steps(stage, root, stage_env(stage))
    except BuildCheckError as exc:
        pytest.fail(str(exc), pytrace=False)
    outside = tmp_path_factory.mktemp("elsewhere")
    (wheel,) = (root / "wheels").glob("*.whl")
    return Built(root, root / workdir(stage).relative_to("/"), copied, wheel, venv, outside)


def devicectl(built: Built, *args: str) -> str:
    return run([str(built.venv / "bin" / "devicectl"), *args], cwd=built.outside)


def test_dockerfile_copies_every_declared_package_and_runs_the_built_environment(built: Built) -> None:
    stages = parse_dockerfile(DOCKERFILE.read_text())
    _, venv_path = build_stage(stages)
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    declared = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    tops = {p.parts[0] for p in built.copied}
    assert tops == declared | {"pyproject.toml", pyproject["project"]["readme"]}
    assert not any("__pycache__" in p.parts for p in built.copied)  # .dockerignore honoured
    # the runtime stage's command is the environment the build stage made
    runtime = stages[-1]
    assert json.loads(runtime.args("ENTRYPOINT")[-1]) == ["devicectl"]
    assert any(f"PATH={venv_path}/bin:" in env for env in runtime.args("ENV"))
    assert built.venv == built.root / PurePosixPath(venv_path).relative_to("/")


def test_wheel_ships_every_copied_package_file(built: Built) -> None:
    """Every module, package and data file copied into the build context is in the wheel."""
    in_wheel = set(zipfile.ZipFile(built.wheel).namelist())
    packaged = [p for p in built.copied if len(p.parts) > 1]
    assert len(packaged) > 100
    missing = sorted(p.as_posix() for p in packaged if p.as_posix() not in in_wheel)
    assert missing == []
    assert {"migrations/alembic.ini", "migrations/script.py.mako"} <= in_wheel


def test_installed_cli_answers_and_migrates(built: Built) -> None:
    version = tomllib.loads((built.src / "pyproject.toml").read_text())["project"]["version"]
    assert devicectl(built, "--version").strip() == f"devicectl {version}"

    settings = json.loads(devicectl(built, "serve", "--config", str(EXAMPLE_CONFIG), "--print-config"))
    assert settings["callback"] == "topology.example.internal:50052"  # from the example file

    url = f"sqlite:///{built.outside / 'devicectl.db'}"
    revisions = {}
    for path in (built.src / "migrations" / "versions").glob("0*.py"):
        text = path.read_text()
        revision = re.search(r'^revision[^=]*= "(\w+)"', text, re.M)
        down = re.search(r'^down_revision[^=]*= "?(\w+)"?', text, re.M)
        assert revision and down, path
        revisions[revision.group(1)] = down.group(1)
    (newest,) = set(revisions) - set(revisions.values())
    upgraded = json.loads(devicectl(built, "--json", "db", "upgrade", "--database-url", url))
    assert (upgraded["before"], upgraded["after"]) == (None, newest)
    status = json.loads(devicectl(built, "--json", "db", "status", "--database-url", url))
    assert status == {"current": newest, "head": newest, "up_to_date": True, "newer": False}


def test_installed_plugins_load_and_imports_stay_in_the_package(built: Built) -> None:
    python = built.venv / "bin" / "python"
    out = run([str(python), "-I", "-"], cwd=built.outside, stdin=SMOKE.read_text())
    assert out.strip().startswith("image smoke: ok (") and f"modules from {purelib(python)};" in out
    assert out.strip().endswith("plugins filedevices, nvml, redfish)")


def test_smoke_check_rejects_modules_from_outside_the_distribution(tmp_path: Path) -> None:
    """The project environment imports the source tree (an editable install): the smoke check
    must refuse that, or it could not notice a file the wheel lacks."""
    import controller

    assert Path(controller.__file__).is_relative_to(REPO), "the project environment is `pip install -e .`"
    done = subprocess.run(
        [sys.executable, "-I", "-"],
        input=SMOKE.read_text(),
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    origin = REPO / "controller" / "__init__.py"
    assert f"module controller comes from {origin}, not from the installed distribution" in done.stdout
    assert f"importing the project opened {REPO}/" in done.stdout


@pytest.mark.parametrize(
    ("dockerfile", "error"),
    [
        (
            "FROM x AS build\nWORKDIR /src\nCOPY nowhere ./nowhere\nFROM x\nCOPY --from=build /o /o\n",
            "deploy/Dockerfile copies nowhere, which does not exist",
        ),
        (
            "FROM x AS build\nRUN python -m venv /o && apt-get install gcc\n"
            "FROM x\nCOPY --from=build /o /o\n",
            "runs 'apt-get install gcc', which tests/deploy/test_image_build.py cannot reproduce",
        ),
        (
            "FROM x AS build\nRUN python -m venv /o\nFROM x\nCOPY --from=build /o /o\n",
            "never installs the project",
        ),
    ],
    ids=["copies-a-missing-path", "unknown-run-step", "never-installs"],
)
def test_build_check_refuses_what_it_cannot_find_or_reproduce(
    tmp_path: Path, dockerfile: str, error: str
) -> None:
    stage, _ = build_stage(parse_dockerfile(dockerfile))
    with pytest.raises(BuildCheckError, match=re.escape(error)):
        assemble_context(stage, REPO, tmp_path)
        reproduce_run_steps(stage, tmp_path, {})


def test_dockerignore_patterns(tmp_path: Path) -> None:
    (tmp_path / ".dockerignore").write_text("**/__pycache__\n*.egg-info\nvar\n")
    patterns = ignore_patterns(tmp_path)
    for path, expected in [
        ("controller/store/__pycache__/x.pyc", True),
        ("__pycache__", True),
        ("devicectl.egg-info/PKG-INFO", True),
        ("controller/devicectl.egg-info", False),
        ("var/drills/result.json", True),
        ("controller/var.py", False),
    ]:
        assert ignored(PurePosixPath(path), patterns) is expected, path


def docker_daemon() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


def test_check_image_without_a_daemon_says_so_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        ["sh", str(CHECK_IMAGE)],
        env={**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.count("\n") == 1 and "no Docker daemon is running" in done.stderr


@pytest.mark.timeout(1800)
@pytest.mark.skipif(not docker_daemon(), reason="no Docker daemon (docker info fails)")
def test_check_image_builds_and_smoke_checks_the_image() -> None:
    done = subprocess.run(
        ["sh", str(CHECK_IMAGE), "devicectl:test-image-build"], capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "image devicectl:test-image-build: ok (uid 10001" in done.stdout
