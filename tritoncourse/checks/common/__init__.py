"""What several phases' checks share: launching a learner's kernel with its errors explained (``launch``), the
element-wise harness of phases 1 and 4 (``elementwise``), calling a learner's plain Python function (``functions``)."""
