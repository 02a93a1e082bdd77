"""Evidence that leaves the machine: archives pushed to and pulled from OCI registries.

`oci` is the artifact format and transport; `queue` is the daemon's durable
list of archives still to push.
"""
