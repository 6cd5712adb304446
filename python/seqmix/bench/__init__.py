"""``seqmix bench``: times seqmix against its references, side by side, same inputs."""
