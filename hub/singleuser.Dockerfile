# The course's learner image (docker/Dockerfile, target `learner`) as the hub's single-user image for DockerSpawner
# (docs/JUPYTERHUB.md, "DockerSpawner"). `python3 hub/tritonhub.py setup --spawner docker` builds it, from a build
# context of its own that holds only requirements/lock.txt, requirements/hub.txt, pyproject.toml and tritoncourse/
# (never source/, the gradebook or a submission).
#
# What the hub needs and the learner image leaves out:
# - jupyterhub-singleuser: requirements/hub.txt's jupyterhub (the hub's own version), with lock.txt's pins kept
#   (check_pins.py fails the build if one moved);
# - the tritoncourse package: the learner image finds it in the course mounted at /course; a hub mounts no course;
# - nbgrader's Assignment List and its menu (the learner image turns them off: it has no exchange; the hub has one).
# Formgrader, Create Assignment and the Course List stay off. The hub runs each container as the learner's own
# Unix uid and gid (hub/jupyterhub_config.py), so the user below is only the default for a plain `docker run`.

ARG LEARNER_IMAGE=triton-course:cpu
# hadolint ignore=DL3006
FROM ${LEARNER_IMAGE}
ARG NBGRADER_HUB_ON="@jupyter/nbgrader:assignment-list @jupyter/nbgrader:menu"
USER 0
COPY requirements/lock.txt requirements/hub.txt /opt/hub-requirements/
COPY pyproject.toml /opt/hub-course/pyproject.toml
COPY tritoncourse /opt/hub-course/tritoncourse
# (pip's downloads stay in BuildKit's cache, out of the image.)
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install -c /opt/hub-requirements/lock.txt -c /opt/hub-requirements/hub.txt jupyterhub \
    && pip install --no-deps --no-build-isolation /opt/hub-course \
    && rm -rf /opt/hub-course \
    && python /opt/course/check_pins.py /opt/course-requirements
# hadolint ignore=SC2086
RUN jupyter labextension unlock --level=sys_prefix ${NBGRADER_HUB_ON} \
    && jupyter labextension enable --level=sys_prefix ${NBGRADER_HUB_ON} \
    && jupyter server extension enable --sys-prefix nbgrader.server_extensions.assignment_list
# The learner image's health check asks for JupyterLab at /; under the hub it serves /user/NAME/ only.
HEALTHCHECK NONE
USER learner
CMD ["jupyterhub-singleuser"]
