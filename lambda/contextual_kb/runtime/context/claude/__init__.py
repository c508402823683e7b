"""The Claude engine (``CONTEXT_STRATEGY=claude``): ``engine`` drives it; ``client`` is the only module that
calls the model; ``prompts`` and ``answers`` make requests and check what comes back; ``scheduling``,
``flow_control`` and ``windows`` decide which call runs when and on what; ``memory`` remembers contexts in
S3; ``accounting`` and ``pricing`` count what it cost."""
