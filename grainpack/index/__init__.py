"""Pure index math: hashing, orders, mixture schedules, mixing, row streams, row layout, slots.

Every function here maps integers and document lengths to integers; tokens never flow
through this layer. It imports numpy and the standard library only (a test enforces it).
"""
