"""Pure data and functions: the model, the field table, formatting, views and the cluster.

``model`` (frozen samples, ``None`` for N/A), ``fields`` (one descriptor per GPU field),
``format``, ``views``, ``idle``, ``selection``, ``cluster``, ``painting`` and ``text_table``
(headless text), ``ranking`` (``gpumon pick``), ``usage``, ``report`` and ``periods``
(``gpumon report``). The lowest layer: the standard library only, no I/O, no threads.
"""
