"""nbgrader settings for the learner's workspace (JupyterLab's Validate button, `nbgrader validate`).

Every `%%kernel_test` cell runs in a fresh process; on the CPU interpreter one can take a minute.
"""
c = get_config()  # noqa: F821
c.Execute.timeout = 300
