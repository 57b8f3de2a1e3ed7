"""Where an attempt runs: the local executor, Ray, and the channel back.

Modules (imported by their full names; this file imports nothing):

- ``base``: The seam between the scheduler and an executor: what an attempt's job is, what an
  executor must do, and the status of a lost worker (``TrialJob``, ``Executor``)
- ``channel``: The way back from a remote attempt to the driver: its hooks, called over HTTP
  (``ChannelServer``, ``call``, ``RemoteHooks``)
- ``local``: Where an experiment's attempts run: the seam between the scheduler and one trial's
  stages (``LocalExecutor``, ``make_executor``)
- ``on_ray``: ``--executor ray``: each attempt's stages in a Ray task, on whichever node has
  room for it (``RayExecutor``)
- ``ray_transfer``: Files between the driver and a Ray worker without a shared file system
  (``object_store``) (``pack``, ``files_of``, ``changed_since``, ``unpack_into``)
"""
