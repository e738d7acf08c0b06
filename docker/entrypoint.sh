#!/usr/bin/env bash
# The container's commands (its ENTRYPOINT). The course is mounted at $COURSE_DIR (/course).
#
#   lab                    JupyterLab on notebooks/ (port 8888); copies released notebooks not there yet
#   check PHASE... | all   run a notebook's tests in fresh processes (exit code 0: every test passed)
#   run PHASE... | all     run every cell of a notebook from the top in a fresh kernel, like Run All;
#                          headless (each widget drawn once); the file is not changed (exit code 0: no cell
#                          raised an error)
#   reset PHASE            back up notebooks/PHASE.ipynb and restore the released version
#   submit PHASE STUDENT   check notebooks/PHASE.ipynb, then write submissions/STUDENT__PHASE.ipynb, the file to
#                          hand in (the same as `make submit PHASE=... STUDENT=...`; --no-check: no tests first)
#   device                 where kernels run: the GPU (and nvidia-smi) or Triton's interpreter
#   lab-instructor         JupyterLab on the whole course, for the instructor's image (formgrader)
#   anything else          run as a command: bash, nvidia-smi, python ..., nbgrader ...
#
# PHASE is a phase's name (01_vector_add) or a notebook's path (notebooks/01_vector_add.ipynb).
set -euo pipefail

COURSE_DIR=${COURSE_DIR:-/course}
PYTHON=${PYTHON:-python}
JUPYTER_PORT=${JUPYTER_PORT:-8888}
JUPYTER_IP=${JUPYTER_IP:-0.0.0.0}

usage() {  # the comment at the top of this file
    sed -n '2,/^[^#]/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

need_course() {
    if [ ! -d "$COURSE_DIR/release" ] || [ ! -d "$COURSE_DIR/tritoncourse" ]; then
        echo "No course at $COURSE_DIR: run docker compose from the course folder (docker/compose.yaml" \
             "mounts it at /course), or mount it yourself with -v \"\$PWD:/course\"." >&2
        exit 2
    fi
    cd "$COURSE_DIR"
}

phases() {
    local dir
    for dir in release/*/; do
        if [ -e "$dir$(basename "$dir").ipynb" ]; then
            basename "$dir"
        fi
    done
}

notebook_of() {
    case "$1" in
        *.ipynb) echo "$1" ;;
        *) echo "notebooks/$1.ipynb" ;;
    esac
}

# Like `make notebooks`: copy the released notebooks that are not in notebooks/ yet; never overwrite.
fill_notebooks() {
    mkdir -p notebooks 2>/dev/null || true
    if [ ! -w notebooks ]; then
        echo "notebooks/ is not writable by this container's user (uid $(id -u), gid $(id -g))." >&2
        echo "On Linux, build the image with your ids: HOST_UID=\$(id -u) HOST_GID=\$(id -g)" \
             "docker compose -f docker/compose.yaml build" >&2
        exit 2
    fi
    local phase
    for phase in $(phases); do
        if [ ! -e "notebooks/$phase.ipynb" ]; then
            cp "release/$phase/$phase.ipynb" "notebooks/$phase.ipynb"
            echo "notebooks/$phase.ipynb created from release/"
        fi
    done
}

# Run "$1" (check or run) on each phase; the closing line counts the phases that passed and failed.
each_phase() {
    local what=$1 passed=0 failed=0 nb target targets
    shift
    [ $# -gt 0 ] || { usage >&2; exit 2; }
    if [ "$1" = all ]; then
        mapfile -t targets < <(phases)
        set -- "${targets[@]}"
    fi
    for target in "$@"; do
        nb=$(notebook_of "$target")
        echo "== $what $nb"
        if [ ! -e "$nb" ]; then
            echo "$nb does not exist yet: starting JupyterLab (the lab service) creates it from release/;" \
                 "so does the command \`reset $(basename "$nb" .ipynb)\`."
            failed=$((failed + 1))
            continue
        fi
        if "${what}_one" "$nb"; then
            passed=$((passed + 1))
        else
            failed=$((failed + 1))
        fi
    done
    if [ $# -gt 1 ]; then
        echo "phases: $passed passed, $failed failed"
    fi
    [ "$failed" -eq 0 ]
}

check_one() {
    "$PYTHON" -m tritoncourse check "$1"
}

run_one() {
    local out
    out=$(mktemp -d)
    # Headless: each widget draws its picture once and creates no ipywidgets object. With widgets, about one run
    # in ten of a notebook waited forever for the widget cell's reply (jupyter/nbclient#312; seen here with
    # ipykernel 7.4 on phase 5's first widget, 2026-11-25).
    if TRITONCOURSE_HEADLESS=1 "$PYTHON" -m jupyter nbconvert --to notebook --execute --log-level=WARN \
            --ExecutePreprocessor.timeout=600 --output-dir="$out" "$1"; then
        echo "$1: every cell ran without an error."
        rm -rf "$out"
    else
        rm -rf "$out"
        echo "$1: a cell raised an error (above). Open the notebook in JupyterLab to fix it."
        return 1
    fi
}

jupyter_lab() {
    local root=$1
    shift
    local extra=()
    if [ "$(id -u)" = 0 ]; then
        extra+=(--allow-root)
    fi
    # The server's working directory is its root: Validate reads nbgrader_config.py from there
    # (notebooks/nbgrader_config.py for the learner, the course's own for the instructor).
    cd "$root"
    exec "$PYTHON" -m jupyter lab --no-browser --ip="$JUPYTER_IP" --port="$JUPYTER_PORT" \
        --ServerApp.root_dir="$root" \
        --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate "${extra[@]}" "$@"
}

command=${1:-lab}
[ $# -gt 0 ] && shift
case "$command" in
    lab)
        need_course
        fill_notebooks
        jupyter_lab "$COURSE_DIR/notebooks" "$@"
        ;;
    lab-instructor)
        need_course
        jupyter_lab "$COURSE_DIR" "$@"
        ;;
    check | run)
        need_course
        each_phase "$command" "$@"
        ;;
    reset)
        need_course
        [ $# -eq 1 ] || { usage >&2; exit 2; }
        exec "$PYTHON" -m tritoncourse reset "$(basename "$1" .ipynb)"
        ;;
    submit)
        need_course
        if [ $# -lt 2 ] || [[ "$2" == -* ]]; then
            echo "usage: submit PHASE STUDENT [--no-check]   (STUDENT: your learner id, as your instructor gave it)" >&2
            exit 2
        fi
        phase=$(basename "$1" .ipynb)
        student=$2
        shift 2
        exec "$PYTHON" -m tritoncourse submit "$phase" --student "$student" --course "$COURSE_DIR" "$@"
        ;;
    device)
        need_course
        if command -v nvidia-smi >/dev/null 2>&1; then
            nvidia-smi || true
        fi
        exec "$PYTHON" -c "from tritoncourse.device import describe_device; print(describe_device())"
        ;;
    help | -h | --help)
        usage
        ;;
    *)
        exec "$command" "$@"
        ;;
esac
