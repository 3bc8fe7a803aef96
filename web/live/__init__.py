"""Live matches, for the people who watch and play them: the versioned match streams and
the lobby (``streams``), the matches in memory and who watches them (``livematches``,
``spectators``), matches followed from the database (``follow``) and stored ones as the
protocol's types (``convert``), and the seats people play in a browser (``human``,
``browserseats``, with their asyncio side in ``browserhub``).
"""
