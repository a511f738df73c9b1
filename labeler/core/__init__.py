"""The ground floor: small helpers every other part of labeler builds on, importing nothing from
labeler but its error family (``labeler.errors``, on the same floor).

``times`` (When, parse_time, stamp), ``names`` (ROLES, STATUSES, check_name) and ``cache`` (a small
LRU and the data-version token that says when a database file changed). Import the submodules.
"""
