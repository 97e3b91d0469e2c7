"""The user's face: ``magpy.compile``, ``explain``, ``stats``, ``save``/``load``/``export``.

==========================  ================================================================
module                      what
==========================  ================================================================
``compiled``                ``compile``, ``CompiledModule``, ``stats``, ``reset``,
                            ``synchronize``, ``explain`` and its ``Explanation``
``explain_html``            an ``Explanation`` as one self-contained HTML page
``persist/``                ``save``/``load``/``export`` of compiled programs
==========================  ================================================================
"""
