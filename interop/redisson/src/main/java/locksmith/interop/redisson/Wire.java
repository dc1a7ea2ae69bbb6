package locksmith.interop.redisson;

import java.io.PrintStream;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;

import org.redisson.client.RedisException;

/**
 * The peer's stdout: one whole line per write, flushed at once. Answers come
 * from many threads (Redisson's event loop, the peer's executor); the lock
 * keeps their lines whole.
 */
final class Wire {

    private final PrintStream out;
    private boolean closed;

    Wire(PrintStream out) {
        this.out = out;
    }

    synchronized void line(String line) {
        if (closed) {
            return;
        }
        out.print(line);
        out.print('\n');
        out.flush();
    }

    /** Writes a last line, then drops every later one (answers of requests cut short by shutdown). */
    synchronized void lastLine(String line) {
        line(line);
        closed = true;
    }

    /** Drops every later line. */
    synchronized void close() {
        closed = true;
    }

    void ok(String id, String value) {
        line(value == null ? id + " ok" : id + " ok " + value);
    }

    void err(String id, Throwable e) {
        line(id + " err " + describe(e));
    }

    /** {@code <SimpleClassName> <message>}, the message on one line (absent when there is none). */
    static String describe(Throwable e) {
        Throwable t = unwrap(e);
        String kind;
        if (t instanceof ProtocolError) {
            kind = ((ProtocolError) t).kind;
        } else {
            kind = t.getClass().getSimpleName();
            if (kind.isEmpty()) {
                kind = t.getClass().getName();
            }
        }
        String msg = t.getMessage();
        if (msg == null || msg.isBlank()) {
            return kind;
        }
        return kind + " " + msg.replace("\r\n", " ").replace('\n', ' ').replace('\r', ' ').strip();
    }

    /**
     * Redisson's futures fail with CompletionException around the real cause
     * (e.g. IllegalMonitorStateException from unlock); its sync paths wrap
     * a non-Redis cause in RedisException. Report the cause.
     */
    static Throwable unwrap(Throwable e) {
        Throwable t = e;
        for (int i = 0; i < 16 && t.getCause() != null; i++) {
            if (t instanceof CompletionException || t instanceof ExecutionException) {
                t = t.getCause();
            } else if (t instanceof RedisException && t.getCause() instanceof IllegalMonitorStateException) {
                t = t.getCause();
            } else {
                break;
            }
        }
        return t;
    }

    /** A request the peer itself refuses; {@code kind} stands where an exception class name would. */
    static final class ProtocolError extends RuntimeException {
        private static final long serialVersionUID = 1L;
        final String kind;

        ProtocolError(String kind, String message) {
            super(message, null, false, false);
            this.kind = kind;
        }
    }
}
