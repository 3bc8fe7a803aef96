"""What browsers read over HTTP: the pages and static files (``http``), the JSON API
(``api``) and the database reads behind it (``dbreads``), the Host and Origin checks every
request passes (``hosts``), the training runs' metrics and the games' ratings as pages and
live feeds (``metrics``, ``metricsfeed``, ``ratingsfeed``), and the stored checkpoints a
person may play (``checkpoints``). The files themselves are in ``web/static/``.
"""
