/*
 * Claim, read, write under fencing tokens (DESIGN.md "Fenced writes").
 *
 * Three holders race for one SKU row. The lock is modelled as giving no
 * exclusion at all (every lease may be lost at any moment: a paused holder,
 * an expired TTL), so whatever the interleaving, only the store's fence
 * condition stands between the holders and a lost update. Holders 2 and 3
 * carry the same token with different lease ids: a token source that lost
 * its counter in a failover.
 *
 * Variants (spin -D...):
 *   (none)     claim, then a write that requires the claimed fence: safe
 *   NOCLAIM    plain read, then a fenced write (token >= fence): lost update
 *   NOHOLDER   claim and write compare the token only, not the lease id
 *   NOFENCE    plain read, unconditional write (--fencing=off)
 *
 * The property: a write the store accepts was computed from the value it
 * overwrites (no lost update), and stock never goes below zero.
 */

byte fence = 0;     /* skus.fence_token */
byte holder = 0;    /* skus.fence_holder (lease id; 0 = none yet) */
byte stock = 2;     /* skus.available */

#define mine(t, id) (fence == t && holder == id)

proctype Holder(byte t; byte id) {
	byte seen;
	bool claimed = false;
#if defined(NOCLAIM) || defined(NOFENCE)
	atomic { seen = stock; claimed = true }
#elif defined(NOHOLDER)
	atomic { if :: fence <= t -> fence = t; holder = id; seen = stock; claimed = true :: else -> skip fi }
#else
	atomic { if :: fence < t || mine(t, id) -> fence = t; holder = id; seen = stock; claimed = true :: else -> skip fi }
#endif
	/* 0 rows: stale_fence. Out of stock: insufficient_stock. Either way nothing is written. */
	if
	:: !claimed || seen == 0 -> goto done
	:: else -> skip
	fi;
	/* Here the holder may pause for as long as it likes: every other step can run. */
	atomic {
		if
#if defined(NOFENCE)
		:: true ->
#elif defined(NOCLAIM)
		:: fence < t || mine(t, id) -> fence = t; holder = id;
#elif defined(NOHOLDER)
		:: fence == t ->
#else
		:: mine(t, id) ->
#endif
			assert(stock == seen); /* the write is based on what it overwrites */
			stock = seen - 1
		:: else -> skip /* stale_fence: the transaction rolls back */
		fi
	}
done:
	skip
}

init {
	atomic {
		run Holder(1, 1);
		run Holder(2, 2);
		run Holder(2, 3)
	}
}
