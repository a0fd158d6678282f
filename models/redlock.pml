/*
 * The Redlock fencing token (DESIGN.md "Redlock"): round 1 takes the lock
 * with SET NX on every node and reads each node's fence counter; the token is
 * the highest counter among the nodes granted, plus one; round 2 raises the
 * counter to the token (never lowers it) on every node that answers, and the
 * token is valid only when a majority of the nodes holding our lock took it.
 *
 * Acquisitions run one after another (each after the last released), so a
 * token must exceed every valid token before it. Faults, chosen by spin:
 *   - any node may carry a foreign lock key (a crashed client's, until its
 *     TTL), so it answers but does not grant;
 *   - up to N-Q nodes do not answer an acquisition at all (down, paused,
 *     partitioned);
 *   - nodes restart empty (counter and lock gone) between acquisitions.
 * The tolerance being checked: between two valid acquisitions, the nodes
 * that missed the first one's rounds plus the nodes restarted empty since
 * number at most N-Q (two of five, one of three).
 *
 * Variants: NODES=3 or 5 (default 5); HELDONLY raises the counter only where
 * our lock is held (the scheme before it was fixed: a node that answered but
 * held a foreign key never learns the token); NOROUND2 skips round two.
 */

#ifndef NODES
#define NODES 5
#endif
#define Q (NODES / 2 + 1)
#define ROUNDS 3

byte ctr[NODES];      /* stockguard:{sku}:fence on each node */
bool foreign[NODES];  /* a lock key of someone else on the node */
byte last = 0;        /* the highest valid token issued so far */
byte budget = 0;      /* empty restarts still within the tolerance */

active proctype Client() {
	byte round = 0, n, granted, token, missed, learned;
	bool up[NODES], got[NODES];

	do
	:: round == ROUNDS -> break
	:: round < ROUNDS ->
		round++;
		/* Restarts since the last valid token, within the budget. */
		do
		:: budget > 0 ->
			select(n : 0 .. NODES - 1);
			atomic { ctr[n] = 0; foreign[n] = false; budget-- }
		:: true -> break
		od;
		/* Stale keys come and go; who answers is spin's choice. */
		missed = 0; granted = 0; token = 0;
		for (n : 0 .. NODES - 1) {
			if :: foreign[n] = true :: foreign[n] = false fi;
			if
			:: missed < NODES - Q -> up[n] = false; missed++
			:: up[n] = true
			fi;
			got[n] = up[n] && !foreign[n];
			if
			:: got[n] -> granted++; if :: ctr[n] >= token -> token = ctr[n] :: else -> skip fi
			:: else -> skip
			fi
		}
		if
		:: granted < Q -> skip /* not acquired: unlock everywhere, retry later */
		:: else ->
			token++;
			learned = 0;
#ifndef NOROUND2
			for (n : 0 .. NODES - 1) {
#ifdef HELDONLY
				if :: got[n] && ctr[n] < token -> ctr[n] = token :: else -> skip fi;
				if :: got[n] -> learned++ :: else -> skip fi
#else
				if :: up[n] && ctr[n] < token -> ctr[n] = token :: else -> skip fi;
				if :: got[n] -> learned++ :: else -> skip fi
#endif
			}
#else
			learned = granted;
#endif
			if
			:: learned >= Q ->
				assert(token > last); /* unique and increasing */
				last = token;
				/* What the tolerance leaves for restarts before the next. */
				budget = NODES - Q - missed
			:: else -> skip
			fi
		fi
	od
}
