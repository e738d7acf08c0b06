#!/usr/bin/env bash
# Developers only: build .whl/, the packages a bare device machine (torch, triton, numpy... but no Jupyter or
# nbgrader, no registry) needs to grade, under the 64 MB a `run` call may carry. docs/GPU-RUNS.md says how to use it.
# Needs tools/system-deps.sh to have run here (bubblewrap's .deb from the apt cache).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
rm -rf .whl && mkdir .whl
# What the device image has already, or grading does not use (JupyterLab, fonts, plots, docs, tests).
skip='^(triton|jupyterlab|notebook|pandas|sympy|mpmath|networkx|setuptools|fonttools|matplotlib|pillow|contourpy|kiwisolver|cycler|pyparsing|jedi|parso|babel|widgetsnbextension|jupyter-builder|jupyter_builder|pygments|psycopg.*|jupyterlab-server|jupyterlab_server|jupyter-lsp|jupyter_lsp|pytest|pluggy|iniconfig|torch|nvidia-.*)=='
grep -E '^[A-Za-z0-9]' requirements/lock.txt | sed 's/ *;.*//; s/ *#.*//' | grep -viE "$skip" > .whl/req.txt
grep -qi '^dask-jobqueue' .whl/req.txt || echo 'dask-jobqueue==0.9.0' >> .whl/req.txt
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 -d .whl -r .whl/req.txt
rm .whl/req.txt
cp /var/cache/apt/archives/bubblewrap_*_amd64.deb .whl/
du -sh .whl
