"""Harbor task folders: read, validated and imported as assay bundles.

Modules (imported by their full names; this file imports nothing):

- ``docker``: What a Harbor task's ``environment/Dockerfile`` becomes: the bundle's own
  Dockerfile, built on its real base, and the starting tree of its workspace (``Copy``,
  ``EnvironmentPlan``, ``module_of``, ``read_dockerfile``, ``Additions``,
  ``carried_dockerfile``)
- ``plan``: Reading one Harbor task folder for ``task import-harbor``: validated, and what of it
  cannot run here said with the file, line and instruction (``HarborPlan``, ``strip_canary``,
  ``task_id_of``, ``plan_import``)
- ``reward``: Multi-metric ``reward.json``: which number of it decides an imported Harbor task
  (``RewardScan``, ``scan_rewards``, ``reducer_command``)
- ``task``: ``assay task import-harbor``: Harbor task folders become assay task bundles
  (``SandboxPaths``, ``Imported``, ``path_rewriter``, ``task_yaml``, ...)
- ``tests``: Harbor's standard test script, recognised and run with the image's own pytest
  (``StandardScript``, ``recognise``)
- ``toml``: Reading a Harbor task's ``task.toml`` so that every problem names its file, line and
  field (``HarborVerifier``, ``HarborAgent``, ``HarborEnvironment``, ``HarborPackage``, ...)
"""
